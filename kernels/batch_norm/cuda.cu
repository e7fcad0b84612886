// Batch normalisation over x viewed as [N, C, S] (S = spatial elements), one
// set of statistics per channel: training forward (batch statistics +
// running-stat update on the device), eval forward, backward, and the commit
// of a staged running-stat update unless the step was skipped.
//
// What: the semantics of kernels/batch_norm/cpu.cpp:
//   training  mean = E[x], var = E[(x - mean)^2] (biased) normalise;
//             running = (1 - momentum) * running + momentum * (mean, unbiased var)
//   eval      the running statistics normalise
//   y = (x - mean) * invstd * weight + bias,  invstd = 1 / sqrt(var + eps)
//   backward  dbias = sum(dy), dweight = sum(dy * xhat),
//             dx = weight * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
//             (training), dx = weight * invstd * dy (eval).
//   commit    unless *found_inf: running = staged, num_batches_tracked += batches
// Algorithm: per-channel reductions are split across blocks: block
//   (channel, slice) reduces one slice of the channel's N*S values (256
//   threads striding, then a warp-shuffle + shared-memory block reduction)
//   into a partial; then a block per channel adds its partials in a fixed
//   order (kernels::batch_norm_slices picks the slices: enough blocks in all
//   to fill a GPU when C is small and N*S large, one slice for small
//   channels). Statistics are two-pass (mean, then the sum of squared
//   deviations from it), which avoids the cancellation of E[x^2] - E[x]^2.
//   The second stage writes the channel's mean/invstd and updates the
//   running buffers in place: no host round trip. The elementwise parts
//   (normalise, dx) are one thread per element, reading the per-channel
//   scale/shift. Everything is deterministic (fixed reduction trees, no
//   atomics).
// Precision: statistics, weight/bias and their gradients are f32 (f64 for
//   f64 inputs); x/y/dy/dx elements are rounded once on store. (The CPU
//   backend accumulates its channel sums in double; the two agree to f32
//   rounding for the small channels of the tests.)
// Bound: bandwidth-bound: training forward reads x three times (two
//   statistics passes + normalise), backward reads dy and x twice. Left on the
//   table: Welford single pass, vector loads.
// Speed: not yet measured on a GPU.
#include <cmath>

#include "kernels/common/block_reduce.h"
#include "kernels/batch_norm/api.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

__device__ __forceinline__ float inv_sqrt(float v) { return 1.0f / sqrtf(v); }
__device__ __forceinline__ double inv_sqrt(double v) { return 1.0 / sqrt(v); }

// The running statistics normalise (eval): a thread per channel.
template <typename E>
__global__ void running_stats_kernel(const typename E::Acc* running_mean, const typename E::Acc* running_var,
                                     double eps, typename E::Acc* save_mean, typename E::Acc* save_invstd,
                                     int64_t channels) {
  using Acc = typename E::Acc;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    save_mean[c] = running_mean[c];
    save_invstd[c] = inv_sqrt(running_var[c] + static_cast<Acc>(eps));
  }
}

// What a slice of a channel sums: its x, its squared deviations from the
// channel's mean, or (backward) dy and dy * (x - mean).
enum PartialKind : int { kSumX = 0, kSumSquaredDeviations = 1, kGradSums = 2 };

// Stage 1: block (channel, slice) reduces its slice of the channel's n * s
// values into partials[channel][slice] (and, for kGradSums, a second sum
// into partials[channels + channel][slice]).
template <typename E>
__global__ void channel_partials_kernel(const typename E::Storage* x, const typename E::Storage* dy,
                                        const typename E::Acc* mean, int kind, typename E::Acc* partials, int64_t n,
                                        int64_t channels, int64_t s) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t c = blockIdx.x, slice = blockIdx.y, slices = gridDim.y, count = n * s;
  const int64_t per_slice = (count + slices - 1) / slices, begin = slice * per_slice;
  const int64_t end = begin + per_slice < count ? begin + per_slice : count;
  const Acc m = kind == kSumX ? Acc(0) : mean[c];
  Acc a = 0, b = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t at = ((j / s) * channels + c) * s + j % s;
    const Acc v = E::to_acc(x[at]);
    if (kind == kSumX) {
      a += v;
    } else if (kind == kSumSquaredDeviations) {
      a += (v - m) * (v - m);
    } else {
      const Acc g = E::to_acc(dy[at]);
      a += g;
      b += g * (v - m);
    }
  }
  a = rowwise::block_sum(a, scratch);
  if (kind == kGradSums) b = rowwise::block_sum(b, scratch);  // kind is the same for the whole block
  if (threadIdx.x == 0) {
    partials[c * slices + slice] = a;
    if (kind == kGradSums) partials[(channels + c) * slices + slice] = b;
  }
}

// Stage 2 helper: the sum of row `row` of the partials, added in a fixed order.
template <typename Acc>
__device__ Acc partials_total(const Acc* partials, int64_t row, int64_t slices, Acc* scratch) {
  Acc sum = 0;
  for (int64_t i = threadIdx.x; i < slices; i += blockDim.x) sum += partials[row * slices + i];
  return rowwise::block_sum(sum, scratch);
}

// Stage 2 of the mean: a block per channel.
template <typename E>
__global__ void finish_mean_kernel(const typename E::Acc* partials, int64_t slices, int64_t count,
                                   typename E::Acc* save_mean) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t c = blockIdx.x;
  const Acc total = partials_total(partials, c, slices, scratch);
  if (threadIdx.x == 0) save_mean[c] = total / static_cast<Acc>(count);
}

// Stage 2 of the variance: invstd, and the running statistics updated in place.
template <typename E>
__global__ void finish_variance_kernel(const typename E::Acc* partials, int64_t slices, int64_t count,
                                       double momentum, double eps, const typename E::Acc* save_mean,
                                       typename E::Acc* save_invstd, typename E::Acc* running_mean,
                                       typename E::Acc* running_var) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t c = blockIdx.x;
  const Acc sq = partials_total(partials, c, slices, scratch);
  if (threadIdx.x != 0) return;
  const Acc var = sq / static_cast<Acc>(count);
  save_invstd[c] = inv_sqrt(var + static_cast<Acc>(eps));
  const Acc m = static_cast<Acc>(momentum);
  if (running_mean != nullptr) running_mean[c] = (Acc(1) - m) * running_mean[c] + m * save_mean[c];
  if (running_var != nullptr) {
    const Acc unbiased = count > 1 ? sq / static_cast<Acc>(count - 1) : var;
    running_var[c] = (Acc(1) - m) * running_var[c] + m * unbiased;
  }
}

template <typename E>
__global__ void normalize_kernel(const typename E::Storage* x, const typename E::Acc* weight,
                                 const typename E::Acc* bias, const typename E::Acc* mean,
                                 const typename E::Acc* invstd, typename E::Storage* y, int64_t n, int64_t channels,
                                 int64_t s) {
  using Acc = typename E::Acc;
  const int64_t total = n * channels * s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / s) % channels;
    const Acc scale = invstd[c] * (weight != nullptr ? weight[c] : Acc(1));
    const Acc shift = (bias != nullptr ? bias[c] : Acc(0)) - mean[c] * scale;
    y[i] = E::from_acc(E::to_acc(x[i]) * scale + shift);
  }
}

// Stage 2 of the gradient sums: sums[c] = sum(dy), sums[C + c] = sum(dy * xhat).
template <typename E>
__global__ void finish_grad_sums_kernel(const typename E::Acc* partials, int64_t slices, int64_t channels,
                                        const typename E::Acc* invstd, typename E::Acc* dweight,
                                        typename E::Acc* dbias, typename E::Acc* sums) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t c = blockIdx.x;
  const Acc a = partials_total(partials, c, slices, scratch);
  const Acc b = partials_total(partials, channels + c, slices, scratch);
  if (threadIdx.x == 0) {
    const Acc dxhat = b * invstd[c];
    sums[c] = a;
    sums[channels + c] = dxhat;
    if (dweight != nullptr) dweight[c] = dxhat;
    if (dbias != nullptr) dbias[c] = a;
  }
}

template <typename E>
__global__ void grad_input_kernel(const typename E::Storage* dy, const typename E::Storage* x,
                                  const typename E::Acc* weight, const typename E::Acc* mean,
                                  const typename E::Acc* invstd, const typename E::Acc* sums, bool training,
                                  typename E::Storage* dx, int64_t n, int64_t channels, int64_t s) {
  using Acc = typename E::Acc;
  const int64_t total = n * channels * s;
  const Acc inv_count = n * s > 0 ? Acc(1) / static_cast<Acc>(n * s) : Acc(0);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / s) % channels;
    const Acc istd = invstd[c];
    const Acc scale = istd * (weight != nullptr ? weight[c] : Acc(1));
    const Acc g = E::to_acc(dy[i]);
    if (!training) {
      dx[i] = E::from_acc(g * scale);
      continue;
    }
    const Acc mean_dy = sums[c] * inv_count, mean_dy_xhat = sums[channels + c] * inv_count;
    dx[i] = E::from_acc(scale * (g - mean_dy - (E::to_acc(x[i]) - mean[c]) * istd * mean_dy_xhat));
  }
}

// The commit of a staged running-statistics update: a thread per channel,
// and nothing at all when the step was skipped (*found_inf != 0, NaN too).
template <typename Acc>
__global__ void commit_unless_kernel(const float* found_inf, const Acc* staged_mean, const Acc* staged_var,
                                     Acc* running_mean, Acc* running_var, long long* num_batches_tracked,
                                     int64_t batches, int64_t channels) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t c = first; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    if (running_mean != nullptr) running_mean[c] = staged_mean[c];
    if (running_var != nullptr) running_var[c] = staged_var[c];
  }
  if (first == 0 && num_batches_tracked != nullptr) *num_batches_tracked += batches;
}

}  // namespace

void batch_norm_forward(kernels::KernelDType dtype, const void* x, const void* weight, const void* bias,
                        void* running_mean, void* running_var, bool training, double momentum, double eps, void* y,
                        void* save_mean, void* save_invstd, void* workspace, int64_t n, int64_t c, int64_t s,
                        Stream stream) {
  if (c == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    using Acc = typename E::Acc;
    auto* mean = static_cast<Acc*>(save_mean);
    auto* invstd = static_cast<Acc*>(save_invstd);
    if (training) {
      const int64_t slices = kernels::batch_norm_slices(c, n * s);
      auto* partials = static_cast<Acc*>(workspace);
      const dim3 grid(static_cast<unsigned>(c), static_cast<unsigned>(slices));
      launch("batch_norm_partial_sums", channel_partials_kernel<E>, grid, dim3(kThreads), 0, stream,
             static_cast<const Storage*>(x), static_cast<const Storage*>(nullptr), static_cast<const Acc*>(nullptr),
             static_cast<int>(kSumX), partials, n, c, s);
      launch("batch_norm_finish_mean", finish_mean_kernel<E>, dim3(static_cast<unsigned>(c)), dim3(kThreads), 0,
             stream, static_cast<const Acc*>(partials), slices, n * s, mean);
      launch("batch_norm_partial_squares", channel_partials_kernel<E>, grid, dim3(kThreads), 0, stream,
             static_cast<const Storage*>(x), static_cast<const Storage*>(nullptr), static_cast<const Acc*>(mean),
             static_cast<int>(kSumSquaredDeviations), partials, n, c, s);
      launch("batch_norm_finish_variance", finish_variance_kernel<E>, dim3(static_cast<unsigned>(c)), dim3(kThreads),
             0, stream, static_cast<const Acc*>(partials), slices, n * s, momentum, eps,
             static_cast<const Acc*>(mean), invstd, static_cast<Acc*>(running_mean), static_cast<Acc*>(running_var));
    } else {
      launch("batch_norm_running_stats", running_stats_kernel<E>, grid_for(c), dim3(kThreads), 0, stream,
             static_cast<const Acc*>(running_mean), static_cast<const Acc*>(running_var), eps, mean, invstd, c);
    }
    if (n * c * s == 0) return;
    launch("batch_norm_normalize_kernel", normalize_kernel<E>, grid_for(n * c * s), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<const Acc*>(weight), static_cast<const Acc*>(bias),
           static_cast<const Acc*>(mean), static_cast<const Acc*>(invstd), static_cast<Storage*>(y), n, c, s);
  });
}

void batch_norm_backward(kernels::KernelDType dtype, const void* dy, const void* x, const void* weight,
                         const void* save_mean, const void* save_invstd, bool training, void* dx, void* dweight,
                         void* dbias, void* workspace, int64_t n, int64_t c, int64_t s, Stream stream) {
  if (c == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    using Acc = typename E::Acc;
    const auto* mean = static_cast<const Acc*>(save_mean);
    const auto* invstd = static_cast<const Acc*>(save_invstd);
    const int64_t slices = kernels::batch_norm_slices(c, n * s);
    auto* partials = static_cast<Acc*>(workspace);
    Acc* sums = partials + 2 * c * slices;
    launch("batch_norm_partial_grad_sums", channel_partials_kernel<E>,
           dim3(static_cast<unsigned>(c), static_cast<unsigned>(slices)), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<const Storage*>(dy), mean, static_cast<int>(kGradSums),
           partials, n, c, s);
    launch("batch_norm_finish_grad_sums", finish_grad_sums_kernel<E>, dim3(static_cast<unsigned>(c)), dim3(kThreads),
           0, stream, static_cast<const Acc*>(partials), slices, c, invstd, static_cast<Acc*>(dweight),
           static_cast<Acc*>(dbias), sums);
    if (dx == nullptr || n * c * s == 0) return;
    launch("batch_norm_grad_input_kernel", grad_input_kernel<E>, grid_for(n * c * s), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(dy), static_cast<const Storage*>(x), static_cast<const Acc*>(weight), mean,
           invstd, static_cast<const Acc*>(sums), training, static_cast<Storage*>(dx), n, c, s);
  });
}

void batch_norm_commit_unless(kernels::KernelDType dtype, const float* found_inf, const void* staged_mean,
                              const void* staged_var, void* running_mean, void* running_var,
                              long long* num_batches_tracked, int64_t batches, int64_t c, Stream stream) {
  element::visit(dtype, [&](auto tag) {
    using Acc = typename decltype(tag)::Acc;
    // One block at least: the batch count moves even for a layer of 0 channels.
    launch("batch_norm_commit_unless_kernel", commit_unless_kernel<Acc>, grid_for(c > 0 ? c : 1), dim3(kThreads), 0,
           stream, found_inf, static_cast<const Acc*>(staged_mean), static_cast<const Acc*>(staged_var),
           static_cast<Acc*>(running_mean), static_cast<Acc*>(running_var), num_batches_tracked, batches, c);
  });
}

}  // namespace mt::MT_KERNEL_NS
