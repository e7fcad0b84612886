// Cross-entropy fused with log_softmax, forward and backward.
//
// What: per row r of logits [rows, C] with class index t_r and label
//   smoothing eps, q = (1 - eps) * onehot(t_r) + eps / C:
//     loss_r = -sum_c q_c * log_softmax(x_r)_c
//            = (1 - eps)(log_sum - (x_t - max)) + eps/C * sum_c (log_sum + max - x_c)
//     dloss/dx_rc = grad_r * (softmax(x_r)_c - q_c)
//   Rows whose target is ignore_index get loss 0 and gradient 0 (the caller
//   divides by the count of the others for a mean). The per-element formulas
//   are kernels/cross_entropy/math.h's, which cpu.cpp calls too.
// Algorithm: one block per row. Forward never materialises log_softmax: one
//   read of the row gives the online (max, sum exp) pair and the sum of
//   x_c - x_0 (for smoothing), reduced with warp shuffles + shared memory;
//   thread 0 reads x_t. The row's (max, log_sum) is saved so the backward is
//   a single elementwise pass: read x, write grad, nothing else.
// Precision: the statistics, the sums and the loss in f32 (f64 for f64
//   logits), every term formed from x - max (never x - lse with a rounded
//   lse: at logits ~1e4 that costs 1e-3 relative); a NaN anywhere in a row
//   makes its loss and gradient NaN. The gradient is rounded once to the
//   logits' dtype.
// Bound: bandwidth-bound: forward reads the logits once, backward reads them
//   once and writes the gradient once — the [rows, C] log-probabilities never
//   touch memory (for a 50K vocabulary that is the point of fusing).
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md, 1024 classes, 256 MB):
//   8% of copy bandwidth in f32, 4% in f16/bf16: far off. Not profiled;
//   suspects: the benchmark's mean over 262K rows then ran as a single-block
//   reduction (reduce/cuda.cu splits it over many blocks since 2026-12-02, not yet
//   measured), and 1024-wide rows leave each block little work.
#include <cmath>

#include "kernels/common/block_reduce.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"
#include "kernels/cross_entropy/api.h"
#include "kernels/cross_entropy/math.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace rowwise;

template <typename E>
__global__ void cross_entropy_forward_kernel(const typename E::Storage* logits, const int64_t* target,
                                             typename E::Acc* loss, typename E::Acc* row_stats, int64_t classes,
                                             int64_t ignore_index, typename E::Acc smoothing) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch_max[32], scratch_sum[32], scratch[32];
  const int64_t row = blockIdx.x;
  const typename E::Storage* x = logits + row * classes;
  MaxSum<Acc> stats{negative_infinity<Acc>(), Acc(0)};
  // sum_c (x_c - x_0): shifted by the row's first logit (known before the max
  // is), so a shared offset of 1e4 cancels exactly instead of in the sum.
  const Acc shift = E::to_acc(x[0]);
  Acc shifted_sum = 0;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const Acc v = E::to_acc(x[c]);
    accumulate(stats, v);
    shifted_sum += v - shift;
  }
  stats = block_max_sum(stats, scratch_max, scratch_sum);
  if (smoothing != Acc(0)) shifted_sum = block_sum(shifted_sum, scratch);
  if (threadIdx.x != 0) return;
  const Acc log_sum = acc_log(stats.sum);
  row_stats[2 * row] = stats.max;
  row_stats[2 * row + 1] = log_sum;
  const int64_t label = target[row];
  if (label == ignore_index) {
    loss[row] = 0;
  } else if (label < 0 || label >= classes) {
    loss[row] = static_cast<Acc>(NAN);  // the CPU backend throws; a kernel can only poison the result
  } else {
    // Every term from x - max: (1 - eps)(log_sum - (x_t - max)) + eps/C sum_c (log_sum + max - x_c).
    Acc value = kernels::cross_entropy_target_loss(E::to_acc(x[label]) - stats.max, log_sum, smoothing);
    if (smoothing != Acc(0)) {
      // sum_c (log_sum - (x_c - max)) from the sum of x_c - x_0.
      const Acc n = static_cast<Acc>(classes);
      value += kernels::cross_entropy_smoothing_loss(n * (log_sum + (stats.max - shift)) - shifted_sum, smoothing, n);
    }
    loss[row] = value;
  }
}

template <typename E>
__global__ void cross_entropy_backward_kernel(const typename E::Storage* logits, const int64_t* target,
                                              const typename E::Acc* row_stats, const typename E::Acc* grad_loss,
                                              int64_t grad_loss_stride, typename E::Storage* grad_logits,
                                              int64_t classes, int64_t ignore_index, typename E::Acc smoothing) {
  using Acc = typename E::Acc;
  const int64_t row = blockIdx.x;
  const typename E::Storage* x = logits + row * classes;
  typename E::Storage* dx = grad_logits + row * classes;
  const int64_t label = target[row];
  if (label == ignore_index) {
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) dx[c] = E::from_acc(Acc(0));
    return;
  }
  const bool valid = label >= 0 && label < classes;
  const Acc grad = valid ? grad_loss[row * grad_loss_stride] : static_cast<Acc>(NAN);
  const Acc max = row_stats[2 * row], log_sum = row_stats[2 * row + 1];
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const Acc q = kernels::cross_entropy_target_probability(c == label, smoothing, static_cast<Acc>(classes));
    dx[c] = E::from_acc(kernels::cross_entropy_logit_grad(grad, E::to_acc(x[c]) - max, log_sum, q));
  }
}

}  // namespace

void cross_entropy_forward(kernels::KernelDType dtype, const void* logits, const int64_t* target, void* loss, void* row_stats,
                           int64_t rows, int64_t classes, int64_t ignore_index, double label_smoothing, Stream stream) {
  if (rows <= 0 || classes <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    kernels::declare_launch_work(1.0 * rows * classes * sizeof(typename E::Storage));  // read the logits
    using Acc = typename E::Acc;
    launch("cross_entropy_forward_kernel", cross_entropy_forward_kernel<E>, dim3(static_cast<unsigned>(rows)),
           dim3(threads_for_row(classes)), 0, stream, static_cast<const typename E::Storage*>(logits), target,
           static_cast<Acc*>(loss), static_cast<Acc*>(row_stats), classes, ignore_index, static_cast<Acc>(label_smoothing));
  });
}

void cross_entropy_backward(kernels::KernelDType dtype, const void* logits, const int64_t* target, const void* row_stats,
                            const void* grad_loss, int64_t grad_loss_stride, void* grad_logits, int64_t rows,
                            int64_t classes, int64_t ignore_index, double label_smoothing, Stream stream) {
  if (rows <= 0 || classes <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    kernels::declare_launch_work(2.0 * rows * classes * sizeof(typename E::Storage));  // logits in, gradient out
    using Acc = typename E::Acc;
    launch("cross_entropy_backward_kernel", cross_entropy_backward_kernel<E>, dim3(static_cast<unsigned>(rows)),
           dim3(threads_for_row(classes)), 0, stream, static_cast<const typename E::Storage*>(logits), target,
           static_cast<const Acc*>(row_stats), static_cast<const Acc*>(grad_loss), grad_loss_stride,
           static_cast<typename E::Storage*>(grad_logits), classes, ignore_index, static_cast<Acc>(label_smoothing));
  });
}

}  // namespace mt::MT_KERNEL_NS
