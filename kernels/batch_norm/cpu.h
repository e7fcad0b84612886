// The batch_norm family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/batch_norm/batch_norm.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/batch_norm/api.h"

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
// Unless found_inf (f32 [1], optional) is non-zero: running_mean/var =
// staged_mean/var and num_batches_tracked (i64 [], optional) += batches.
void batch_norm_commit_unless(const Tensor& found_inf, const Tensor& staged_mean, const Tensor& staged_var,
                              const Tensor& running_mean, const Tensor& running_var, const Tensor& num_batches_tracked,
                              int64_t batches);
}  // namespace cpu

}  // namespace mt::kernels
