// The softmax family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/softmax/softmax.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/softmax/math.h"

namespace mt::kernels {

namespace cpu {
void softmax_forward(const Tensor& in, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log);
}  // namespace cpu

}  // namespace mt::kernels
