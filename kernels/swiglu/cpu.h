// The swiglu family's CPU back end (cpu.cpp), as the dispatcher (kernels/swiglu/swiglu.h) calls it.
#pragma once

#include "core/tensor.h"

namespace mt::kernels::cpu {
// Contiguous tensors of one shape and dtype.
void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y);
void swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                     const Tensor& grad_up);
}  // namespace mt::kernels::cpu
