// The layer_norm family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/layer_norm/layer_norm.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/layer_norm/math.h"

namespace mt::kernels {

namespace cpu {
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
// RMSNorm: the same with `mean` undefined (not centered, no bias).
}  // namespace cpu

}  // namespace mt::kernels
