// 2-D pooling over the last two dims of [planes, H, W] views (planes = N*C):
// max pooling (saving the argmax of each window), average pooling with
// optional padding, and adaptive average pooling.
//
// CPU tensors run kernels/pool/cpu.cpp; SIM and CUDA tensors run
// kernels/pool/cuda.cu on contiguous buffers (gather backwards, no atomics).
#pragma once

#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/pool/api.h"
#include "kernels/pool/cpu.h"

namespace mt::kernels {

namespace device_buffers {
// The pooling problem of input `in` [..., H, W] and output `out` [..., OH, OW].
inline PoolShape pool_shape(const char* op, const Tensor& in, const Tensor& out, const Pool2dWindow& window) {
  MT_CHECK(in.dim() >= 2 && out.dim() == in.dim(), "{} kernel: expected [..., H, W] tensors, got {} and {}", op,
           in.shape_string(), out.shape_string());
  PoolShape s;
  static_cast<Pool2dWindow&>(s) = window;
  s.in_h = in.size(-2), s.in_w = in.size(-1), s.out_h = out.size(-2), s.out_w = out.size(-1);
  s.planes = s.in_h * s.in_w == 0 ? 0 : in.numel() / (s.in_h * s.in_w);
  MT_CHECK(s.planes * s.out_h * s.out_w == out.numel(), "{} kernel: {} and {} have different leading dims", op,
           in.shape_string(), out.shape_string());
  return s;
}
}  // namespace device_buffers

inline void max_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y, const Tensor& indices) {
  const Backend backend = backend_for(y.device(), "max_pool2d");
  if (backend == Backend::Cpu) return cpu::max_pool2d_forward(x, window, y, indices);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("max_pool2d", x, y, window);
  const DType dtype = y.dtype();
  const KernelDType kd = kernel_dtype(dtype, "max_pool2d");
  const Tensor vx = contiguous_as(x, dtype), vy = output_buffer(y, dtype);
  // The device kernels always write indices: scratch ones when the caller wants none.
  const Tensor vi = indices.defined() ? output_buffer(indices, kI64) : empty(y.sizes(), kI64, y.device());
  const Stream stream = launch_stream(y.device());
  auto* pi = static_cast<int64_t*>(vi.data_ptr());
  MT_DEVICE_CALL(backend, max_pool2d_forward, kd, vx.data_ptr(), vy.data_ptr(), pi, shape, stream);
  finish_output(vy, y);
  finish_output(vi, indices);
}
// `window`: the forward's (the CPU copies bf16/f16 gradients straight to
// their places when no two windows share an input element).
inline void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2dWindow& window, const Tensor& dx) {
  const Backend backend = backend_for(dx.device(), "max_pool2d_backward");
  if (backend == Backend::Cpu) return cpu::max_pool2d_backward(dy, indices, window, dx);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("max_pool2d_backward", dx, dy, Pool2dWindow{});
  const DType dtype = dx.dtype();
  const KernelDType kd = kernel_dtype(dtype, "max_pool2d_backward");
  const Tensor vdy = contiguous_as(dy, dtype), vi = contiguous_as(indices, kI64), vdx = output_buffer(dx, dtype);
  // f32/f64 accumulate in dx itself; f16/bf16 in an f32 workspace.
  const DType acc = accumulator_dtype(dtype);
  const Tensor work = acc == dtype ? vdx : empty(dx.sizes(), acc, dx.device());
  const Stream stream = launch_stream(dx.device());
  const auto* pi = static_cast<const int64_t*>(vi.data_ptr());
  MT_DEVICE_CALL(backend, max_pool2d_backward, kd, vdy.data_ptr(), pi, vdx.data_ptr(), work.data_ptr(), shape, stream);
  finish_output(vdx, dx);
}
inline void avg_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y) {
  const Backend backend = backend_for(y.device(), "avg_pool2d");
  if (backend == Backend::Cpu) return cpu::avg_pool2d_forward(x, window, y);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("avg_pool2d", x, y, window);
  const DType dtype = y.dtype();
  const KernelDType kd = kernel_dtype(dtype, "avg_pool2d");
  const Tensor vx = contiguous_as(x, dtype), vy = output_buffer(y, dtype);
  const Stream stream = launch_stream(y.device());
  MT_DEVICE_CALL(backend, avg_pool2d_forward, kd, vx.data_ptr(), vy.data_ptr(), shape, stream);
  finish_output(vy, y);
}
inline void avg_pool2d_backward(const Tensor& dy, const Pool2dWindow& window, const Tensor& dx) {
  const Backend backend = backend_for(dx.device(), "avg_pool2d_backward");
  if (backend == Backend::Cpu) return cpu::avg_pool2d_backward(dy, window, dx);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("avg_pool2d_backward", dx, dy, window);
  const DType dtype = dx.dtype();
  const KernelDType kd = kernel_dtype(dtype, "avg_pool2d_backward");
  const Tensor vdy = contiguous_as(dy, dtype), vdx = output_buffer(dx, dtype);
  const Stream stream = launch_stream(dx.device());
  MT_DEVICE_CALL(backend, avg_pool2d_backward, kd, vdy.data_ptr(), vdx.data_ptr(), shape, stream);
  finish_output(vdx, dx);
}
inline void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  const Backend backend = backend_for(y.device(), "adaptive_avg_pool2d");
  if (backend == Backend::Cpu) return cpu::adaptive_avg_pool2d_forward(x, y);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("adaptive_avg_pool2d", x, y, Pool2dWindow{});
  const DType dtype = y.dtype();
  const KernelDType kd = kernel_dtype(dtype, "adaptive_avg_pool2d");
  const Tensor vx = contiguous_as(x, dtype), vy = output_buffer(y, dtype);
  const Stream stream = launch_stream(y.device());
  MT_DEVICE_CALL(backend, adaptive_avg_pool2d_forward, kd, vx.data_ptr(), vy.data_ptr(), shape, stream);
  finish_output(vy, y);
}
inline void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  const Backend backend = backend_for(dx.device(), "adaptive_avg_pool2d_backward");
  if (backend == Backend::Cpu) return cpu::adaptive_avg_pool2d_backward(dy, dx);
  using namespace device_buffers;
  const PoolShape shape = pool_shape("adaptive_avg_pool2d_backward", dx, dy, Pool2dWindow{});
  const DType dtype = dx.dtype();
  const KernelDType kd = kernel_dtype(dtype, "adaptive_avg_pool2d_backward");
  const Tensor vdy = contiguous_as(dy, dtype), vdx = output_buffer(dx, dtype);
  const Stream stream = launch_stream(dx.device());
  MT_DEVICE_CALL(backend, adaptive_avg_pool2d_backward, kd, vdy.data_ptr(), vdx.data_ptr(), shape, stream);
  finish_output(vdx, dx);
}

}  // namespace mt::kernels
