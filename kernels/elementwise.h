// Elementwise kernels: unary math, binary math with broadcasting, where, copy/cast.
// Inputs arrive already broadcast to the output's shape (stride-0 views).
#pragma once

#include "kernels/common/elementwise.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace cpu {
void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args);
void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out, const Tensor& grad_in,
                    UnaryArgs args);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& out, double value);
}  // namespace cpu

inline void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args = {}) {
  backend_for(out.device(), "unary");
  cpu::unary(op, in, out, args);
}
inline void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out,
                           const Tensor& grad_in, UnaryArgs args = {}) {
  backend_for(grad_in.device(), "unary_backward");
  cpu::unary_backward(op, grad_out, in, out, grad_in, args);
}
inline void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  backend_for(out.device(), "binary");
  cpu::binary(op, a, b, out);
}
inline void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  backend_for(out.device(), "where");
  cpu::where(cond, a, b, out);
}
// dst = src with dtype conversion (round once); shapes must match, src may be broadcast.
inline void copy(const Tensor& src, const Tensor& dst) {
  backend_for(dst.device(), "copy");
  cpu::copy(src, dst);
}
inline void fill(const Tensor& out, double value) {
  backend_for(out.device(), "fill");
  cpu::fill(out, value);
}

}  // namespace mt::kernels
