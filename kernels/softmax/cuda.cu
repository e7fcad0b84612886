// softmax / log_softmax over the last dimension, forward and backward.
//
// What: y = softmax(x) or log_softmax(x) per row of a contiguous [rows, cols]
//   buffer (kernels/softmax/softmax.h moves the softmax dim last); and the backward
//   dx = y * (dy - sum(dy * y))   for softmax,
//   dx = dy - exp(y) * sum(dy)    for log_softmax: the per-element formulas
//   of kernels/softmax/math.h, which the CPU back end calls too.
// Algorithm: one thread block per row. Forward is the one-pass "online
//   softmax": each thread keeps a running (max, sum of exp(x - max)) over its
//   strided elements, rescaling the sum whenever the max grows; the pairs are
//   merged with warp shuffles, then across warps through shared memory,
//   giving the row's max and sum in one read of the row. The output pass
//   writes exp(x - max) / sum or (x - max) - log(sum). When the row fits in
//   48 KB of shared memory (12K f32 values) it is cached there on the first
//   read, so global memory is read once and written once; longer rows are
//   read twice.
//   Backward: one block-wide dot product, then one elementwise pass.
// Precision: inputs widen to f32 (f64 stays f64); max, sum and the dot
//   product are f32; each output is rounded once to the input dtype.
// Bound: bandwidth-bound (a few flops per byte). Left on the table: 128-bit
//   vector loads, several rows per block for short rows.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md, rows of 1024, 256 MB):
//   39% of copy bandwidth in f32, 20% in f16/bf16 — the vector loads above
//   are the missing piece.
#include "kernels/common/block_reduce.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"
#include "kernels/softmax/api.h"
#include "kernels/softmax/math.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace rowwise;

template <typename E>
__global__ void softmax_forward_kernel(const typename E::Storage* in, typename E::Storage* out, int64_t cols, bool log,
                                       bool cache_row) {
  using Acc = typename E::Acc;
  MT_DYNAMIC_SHARED(Acc, row_cache);
  __shared__ Acc scratch_max[32], scratch_sum[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  in += offset;
  out += offset;
  MaxSum<Acc> stats{negative_infinity<Acc>(), Acc(0)};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc x = E::to_acc(in[c]);
    if (cache_row) row_cache[c] = x;  // read back below by this same thread: no barrier needed
    accumulate(stats, x);
  }
  stats = block_max_sum(stats, scratch_max, scratch_sum);
  const Acc log_sum = acc_log(stats.sum), inv_sum = Acc(1) / stats.sum;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc shifted = (cache_row ? row_cache[c] : E::to_acc(in[c])) - stats.max;
    out[c] = E::from_acc(kernels::softmax_from_shifted(shifted, log_sum, inv_sum, log));
  }
}

template <typename E>
__global__ void softmax_backward_kernel(const typename E::Storage* grad_out, const typename E::Storage* out,
                                        typename E::Storage* grad_in, int64_t cols, bool log) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  grad_out += offset;
  out += offset;
  grad_in += offset;
  Acc dot = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc y = log ? Acc(0) : E::to_acc(out[c]);  // log_softmax's sum needs dy alone: y is not read
    dot += kernels::softmax_backward_dot_term(E::to_acc(grad_out[c]), y, log);
  }
  dot = block_sum(dot, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    grad_in[c] = E::from_acc(kernels::softmax_backward_from_dot(E::to_acc(grad_out[c]), E::to_acc(out[c]), dot, log));
  }
}

}  // namespace

void softmax_forward(kernels::KernelDType dtype, const void* in, void* out, int64_t rows, int64_t cols, bool log,
                     Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    kernels::declare_launch_work(2.0 * rows * cols * sizeof(typename E::Storage));  // read x, write y
    using Storage = typename E::Storage;
    const std::size_t cache_bytes = static_cast<std::size_t>(cols) * sizeof(typename E::Acc);
    const bool cache_row = cache_bytes <= kRowCacheBytes;
    launch("softmax_forward_kernel", softmax_forward_kernel<E>, dim3(static_cast<unsigned>(rows)),
           dim3(threads_for_row(cols)), cache_row ? cache_bytes : 0, stream, static_cast<const Storage*>(in),
           static_cast<Storage*>(out), cols, log, cache_row);
  });
}

void softmax_backward(kernels::KernelDType dtype, const void* grad_out, const void* out, void* grad_in, int64_t rows,
                      int64_t cols, bool log, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    kernels::declare_launch_work(3.0 * rows * cols * sizeof(typename E::Storage));  // read dy and y, write dx
    using Storage = typename E::Storage;
    launch("softmax_backward_kernel", softmax_backward_kernel<E>, dim3(static_cast<unsigned>(rows)),
           dim3(threads_for_row(cols)), 0, stream, static_cast<const Storage*>(grad_out),
           static_cast<const Storage*>(out), static_cast<Storage*>(grad_in), cols, log);
  });
}

}  // namespace mt::MT_KERNEL_NS
