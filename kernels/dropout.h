// Dropout with Philox: element i is kept when its uniform u_i >= p, where u_i
// is word i%4 of Philox block (offset + i/4) under the seed (core/philox.h).
// The CUDA kernel draws the same u_i, so masks match across devices.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

struct DropoutArgs {
  double p = 0.5;
  uint64_t seed = 0;
  uint64_t block_offset = 0;
};

namespace cpu {
// out = in * keep / (1 - p); mask (u8) records keep.
void dropout_forward(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args);
// grad_in = grad_out * mask / (1 - p)
void dropout_backward(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p);
}  // namespace cpu

inline void dropout_forward(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  backend_for(out.device(), "dropout");
  cpu::dropout_forward(in, out, mask, args);
}
inline void dropout_backward(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  backend_for(grad_in.device(), "dropout_backward");
  cpu::dropout_backward(grad_out, mask, grad_in, p);
}

}  // namespace mt::kernels
