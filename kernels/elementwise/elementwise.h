// Elementwise kernels: unary math, binary math with broadcasting, where, copy/cast.
// Inputs arrive already broadcast to the output's shape (stride-0 views).
#pragma once

#include <utility>
#include <vector>

#include "kernels/elementwise/cpu.h"
#include "kernels/elementwise/math.h"
#include "kernels/elementwise/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace detail {
inline void check_same_shape(const char* op, const Tensor& in, const Tensor& out) {
  MT_CHECK(in.sizes() == out.sizes(), "{}: input shape {} does not match output shape {}", op, in.shape_string(),
           out.shape_string());
}
}  // namespace detail

inline void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args = {}) {
  const Backend backend = backend_for(out.device(), "unary");
  if (backend == Backend::Cpu) return cpu::unary(op, in, out, args);
  detail::check_same_shape("unary", in, out);
  const Stream stream = launch_stream(out.device());
  MT_DEVICE_CALL(backend, unary, op, tensor_ref(in), tensor_ref(out), args.a, args.b, stream);
  mark_written(out);
}
inline void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out,
                           const Tensor& grad_in, UnaryArgs args = {}) {
  const Backend backend = backend_for(grad_in.device(), "unary_backward");
  if (backend == Backend::Cpu) return cpu::unary_backward(op, grad_out, in, out, grad_in, args);
  detail::check_same_shape("unary_backward", grad_out, grad_in);
  const Stream stream = launch_stream(grad_in.device());
  const TensorRef g = tensor_ref(grad_out), x = tensor_ref(in), y = tensor_ref(out), dx = tensor_ref(grad_in);
  MT_DEVICE_CALL(backend, unary_backward, op, g, x, y, dx, args.a, args.b, stream);
  mark_written(grad_in);
}
inline void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "binary");
  if (backend == Backend::Cpu) return cpu::binary(op, a, b, out);
  detail::check_same_shape("binary", a, out);
  detail::check_same_shape("binary", b, out);
  const Stream stream = launch_stream(out.device());
  MT_DEVICE_CALL(backend, binary, op, tensor_ref(a), tensor_ref(b), tensor_ref(out), stream);
  mark_written(out);
}
inline void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "where");
  if (backend == Backend::Cpu) return cpu::where(cond, a, b, out);
  detail::check_same_shape("where", cond, out);
  const Stream stream = launch_stream(out.device());
  MT_DEVICE_CALL(backend, where, tensor_ref(cond), tensor_ref(a), tensor_ref(b), tensor_ref(out), stream);
  mark_written(out);
}
// dst = src with dtype conversion (round once); shapes must match, src may be broadcast.
inline void copy(const Tensor& src, const Tensor& dst) {
  MT_CHECK(src.device() == dst.device() || (src.device().host_accessible() && dst.device().host_accessible()),
           "copy: source is on {} but destination is on {}; use to(device)", src.device(), dst.device());
  const Backend backend = backend_for(dst.device(), "copy");
  if (backend == Backend::Cpu) return cpu::copy(src, dst);
  detail::check_same_shape("copy", src, dst);
  const Stream stream = launch_stream(dst.device());
  MT_DEVICE_CALL(backend, copy, tensor_ref(src), tensor_ref(dst), stream);
  mark_written(dst);
}
inline void fill(const Tensor& out, double value) {
  const Backend backend = backend_for(out.device(), "fill");
  if (backend == Backend::Cpu) return cpu::fill(out, value);
  const Stream stream = launch_stream(out.device());
  MT_DEVICE_CALL(backend, fill, tensor_ref(out), value, stream);
  mark_written(out);
}

// Kernels that walk tensors as flat arrays (multi-tensor AMP/optimizer
// kernels) need them contiguous: stage() returns the tensor itself or a
// contiguous copy on its device, and write_back() copies results into the
// original (strided) tensors after the kernels ran.
class ContiguousStaging {
 public:
  Tensor stage(const Tensor& t, bool written) {
    if (!t.defined() || t.is_contiguous()) return t;
    Tensor c = empty(t.sizes(), t.dtype(), t.device());
    copy(t, c);
    if (written) pending_.emplace_back(c, t);
    alive_.push_back(c);  // the kernels run after stage() returns
    return c;
  }
  void write_back() {
    for (auto& [staged, original] : pending_) copy(staged, original);
    pending_.clear();
  }

 private:
  std::vector<std::pair<Tensor, Tensor>> pending_;
  std::vector<Tensor> alive_;
};

}  // namespace mt::kernels
