// The conv family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/conv/conv.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv/api.h"

namespace mt::kernels {

namespace cpu {
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                    const Tensor& y);
// Any of dx, dweight, dbias may be undefined (not needed).
void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
}  // namespace cpu

}  // namespace mt::kernels
