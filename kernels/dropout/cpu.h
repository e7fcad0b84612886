// The dropout family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/dropout/dropout.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/dropout/api.h"

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

}  // namespace mt::kernels
