// Batch normalisation over x viewed as [N, C, S] (S = the spatial elements),
// one set of statistics per channel. Statistics are computed in f32 (f64 for
// f64 inputs). weight/bias and running buffers may be undefined tensors.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

struct BatchNormArgs {
  bool training = true;
  double momentum = 0.1;
  double eps = 1e-5;
};

namespace cpu {
// Training: batch mean / biased variance normalise, and the running buffers
// (when defined) move toward the batch mean / unbiased variance by `momentum`,
// in place. Eval: the running statistics normalise. save_mean / save_invstd [C]
// receive the mean and 1/sqrt(var + eps) that were used.
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                        const Tensor& running_var, const BatchNormArgs& args, const Tensor& y, const Tensor& save_mean,
                        const Tensor& save_invstd);
// Any of dx, dweight, dbias may be undefined (not needed).
void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias);
}  // namespace cpu

inline void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormArgs& args, const Tensor& y,
                               const Tensor& save_mean, const Tensor& save_invstd) {
  if (backend_for(y.device(), "batch_norm") != Backend::Cpu) {
    fail("batch_norm: no CUDA kernel yet (tensor on {}); run it on the CPU", y.device());
  }
  cpu::batch_norm_forward(x, weight, bias, running_mean, running_var, args, y, save_mean, save_invstd);
}
inline void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_invstd, bool training, const Tensor& dx, const Tensor& dweight,
                                const Tensor& dbias) {
  if (backend_for(dy.device(), "batch_norm_backward") != Backend::Cpu) {
    fail(
        "batch_norm_backward: no CUDA kernel yet (tensor on {}); run it on "
        "the CPU",
        dy.device());
  }
  cpu::batch_norm_backward(dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
}

}  // namespace mt::kernels
