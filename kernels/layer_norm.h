// Fused LayerNorm over the trailing `normalized` elements of each row.
// weight/bias (and their gradients) may be undefined tensors.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

namespace cpu {
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
}  // namespace cpu

inline void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                               const Tensor& mean, const Tensor& rstd) {
  backend_for(y.device(), "layer_norm");
  cpu::layer_norm_forward(x, weight, bias, eps, y, mean, rstd);
}
inline void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  backend_for(dx.device(), "layer_norm_backward");
  cpu::layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias);
}

}  // namespace mt::kernels
