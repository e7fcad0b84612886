// softmax / log_softmax over the last dim of a [rows, cols] problem. The
// caller passes views whose last dim is the softmax dim.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

namespace cpu {
void softmax_forward(const Tensor& in, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log);
}  // namespace cpu

inline void softmax_forward(const Tensor& in, const Tensor& out, bool log) {
  backend_for(out.device(), "softmax");
  cpu::softmax_forward(in, out, log);
}
inline void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  backend_for(grad_in.device(), "softmax_backward");
  cpu::softmax_backward(grad_out, out, grad_in, log);
}

}  // namespace mt::kernels
