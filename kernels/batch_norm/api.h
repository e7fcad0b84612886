// The batch_norm family's CUDA/sim entry points (cuda.cu), over raw
// contiguous NCHW buffers. Statistics and per-channel parameters (mean,
// invstd, running stats, weight, bias, their gradients) are "acc" buffers:
// f32, or f64 when dtype is f64.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::kernels {
// How many blocks share one channel's statistics: enough blocks in all to
// fill a GPU (about 512) when channels are few and long, never slices of
// fewer than 4096 values.
inline int64_t batch_norm_slices(int64_t channels, int64_t count) {
  constexpr int64_t kMinPerSlice = 4096, kTargetBlocks = 512;
  if (channels <= 0 || count <= 0) return 1;
  const int64_t by_work = (count + kMinPerSlice - 1) / kMinPerSlice;
  const int64_t by_fill = (kTargetBlocks + channels - 1) / channels;
  const int64_t slices = by_work < by_fill ? by_work : by_fill;
  return slices > 1 ? slices : 1;
}
// Acc elements of the workspace batch_norm_forward and _backward take:
// partial sums [2, C, slices] and the backward's per-channel sums [2, C].
inline int64_t batch_norm_workspace_elements(int64_t channels, int64_t count) {
  return 2 * channels * batch_norm_slices(channels, count) + 2 * channels;
}
}  // namespace mt::kernels
// x viewed as [N, C, S]. Training: batch statistics into save_mean /
// save_invstd, running stats (acc, may be null) updated in place. Eval: the
// running stats normalise (and are copied into save_mean / save_invstd).
// workspace: batch_norm_workspace_elements(C, N * S) acc elements.
MT_CUDA_KERNEL_API(void batch_norm_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight,
                                           const void* bias, void* running_mean, void* running_var, bool training,
                                           double momentum, double eps, void* y, void* save_mean, void* save_invstd,
                                           void* workspace, int64_t n, int64_t c, int64_t s,
                                           mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void batch_norm_backward(mt::kernels::KernelDType dtype, const void* dy, const void* x,
                                            const void* weight, const void* save_mean, const void* save_invstd,
                                            bool training, void* dx, void* dweight, void* dbias, void* workspace,
                                            int64_t n, int64_t c, int64_t s, mt::kernels::Stream stream))
// The commit of a staged running-statistics update (nn::BatchNorm2d's
// stage_statistics): unless *found_inf is non-zero (a skipped step; a null
// found_inf commits), running_mean/var[c] = staged_mean/var[c] and
// *num_batches_tracked += batches; a skipped step changes nothing. The flag
// is read on the device: no host round trip, capturable. Mean/var buffers
// are acc (f32, f64 when dtype is F64); any pointer may be null.
MT_CUDA_KERNEL_API(void batch_norm_commit_unless(mt::kernels::KernelDType dtype, const float* found_inf,
                                                 const void* staged_mean, const void* staged_var, void* running_mean,
                                                 void* running_var, long long* num_batches_tracked, int64_t batches,
                                                 int64_t c, mt::kernels::Stream stream))
