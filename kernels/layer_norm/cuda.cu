// LayerNorm over the last `cols` elements of each row, forward and backward;
// and RMSNorm, the same kernels without the centering (Centered = false: the
// mean is 0, no mean is saved, no bias, and dx loses its mean(g) term).
//
// What: forward  y = (x - mean) * rstd * w + b, saving mean and rstd per row;
//   backward dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w,
//   xhat = (x - mean) * rstd; dw = sum over rows of dy * xhat; db = sum of dy
//   (the per-element formulas of kernels/layer_norm/math.h, which the CPU
//   back end calls too).
// Algorithm: forward — one block per row, three sweeps over the row: sum ->
//   mean, sum of squared deviations -> biased variance (two-pass, so no
//   catastrophic cancellation from E[x^2] - E[x]^2), then normalise and apply
//   the affine weights. The first sweep caches the row in shared memory when it
//   fits (48 KB), so global memory is read once. Backward dx — one block per
//   row, one fused sweep for both sums, one to write dx. Backward dw/db — a
//   separate kernel: a 32 x 8 thread block owns 32 columns; each of its 8 row
//   lanes sums a fixed stride of rows, then lane 0 adds the 8 partial sums in
//   order. No atomics: the result is bit-identical from run to run
//   (deterministic by default, DESIGN.md §7).
// Precision: mean, variance, rstd and every sum in f32 (f64 for f64 inputs)
//   whatever the input dtype — why autocast may leave layer_norm's statistics
//   to this kernel. Outputs rounded once.
// Bound: bandwidth-bound. The dw/db kernel has only cols/32 blocks, so it
//   under-fills a GPU for narrow layers; a two-stage (row-chunked, then fixed
//   order) reduction is the next step.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md, rows of 1024, 256 MB):
//   forward 51% of copy bandwidth in f32, 27% in f16/bf16.
#include "kernels/common/block_reduce.h"
#include "kernels/common/element.h"
#include "kernels/layer_norm/api.h"
#include "kernels/layer_norm/math.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace rowwise;

template <typename E, bool Centered>
__global__ void layer_norm_forward_kernel(const typename E::Storage* x, const typename E::Storage* weight,
                                          const typename E::Storage* bias, typename E::Acc eps, typename E::Storage* y,
                                          typename E::Acc* mean_out, typename E::Acc* rstd_out, int64_t cols,
                                          bool cache_row) {
  using Acc = typename E::Acc;
  MT_DYNAMIC_SHARED(Acc, row_cache);
  __shared__ Acc scratch[32];
  const int64_t row = blockIdx.x;
  x += row * cols;
  y += row * cols;
  Acc sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc v = E::to_acc(x[c]);
    if (cache_row) row_cache[c] = v;  // each thread re-reads only its own elements
    sum += v;
  }
  const Acc mean = Centered ? block_sum(sum, scratch) / static_cast<Acc>(cols) : Acc(0);
  Acc squares = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc d = (cache_row ? row_cache[c] : E::to_acc(x[c])) - mean;
    squares += d * d;
  }
  const Acc variance = block_sum(squares, scratch) / static_cast<Acc>(cols);  // biased, as LayerNorm defines it
  const Acc rstd = kernels::layer_norm_rstd(variance, eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    Acc v = kernels::layer_norm_normalize(cache_row ? row_cache[c] : E::to_acc(x[c]), mean, rstd);
    if (weight != nullptr) v *= E::to_acc(weight[c]);
    if (bias != nullptr) v += E::to_acc(bias[c]);
    y[c] = E::from_acc(v);
  }
  if (threadIdx.x == 0) {
    if (Centered) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename E, bool Centered>
__global__ void layer_norm_backward_dx_kernel(const typename E::Storage* dy, const typename E::Storage* x,
                                              const typename E::Storage* weight, const typename E::Acc* mean_in,
                                              const typename E::Acc* rstd_in, typename E::Storage* dx, int64_t cols) {
  using Acc = typename E::Acc;
  __shared__ Acc scratch[32];
  const int64_t row = blockIdx.x;
  dy += row * cols;
  x += row * cols;
  dx += row * cols;
  const Acc mean = Centered ? mean_in[row] : Acc(0), rstd = rstd_in[row];
  Acc sum_g = 0, sum_g_xhat = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc g = weight != nullptr ? E::to_acc(dy[c]) * E::to_acc(weight[c]) : E::to_acc(dy[c]);
    sum_g += g;
    sum_g_xhat += g * kernels::layer_norm_normalize(E::to_acc(x[c]), mean, rstd);
  }
  const Acc inv_n = Acc(1) / static_cast<Acc>(cols);
  const Acc mean_g = Centered ? block_sum(sum_g, scratch) * inv_n : Acc(0);
  const Acc mean_g_xhat = block_sum(sum_g_xhat, scratch) * inv_n;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const Acc g = weight != nullptr ? E::to_acc(dy[c]) * E::to_acc(weight[c]) : E::to_acc(dy[c]);
    const Acc xhat = kernels::layer_norm_normalize(E::to_acc(x[c]), mean, rstd);
    dx[c] = E::from_acc(kernels::layer_norm_input_grad(g, xhat, rstd, mean_g, mean_g_xhat));
  }
}

constexpr int kParamColumns = 32, kParamRowLanes = 8;

template <typename E, bool Centered>
__global__ void layer_norm_backward_params_kernel(const typename E::Storage* dy, const typename E::Storage* x,
                                                  const typename E::Acc* mean_in, const typename E::Acc* rstd_in,
                                                  typename E::Storage* dweight, typename E::Storage* dbias,
                                                  int64_t rows, int64_t cols) {
  using Acc = typename E::Acc;
  __shared__ Acc partial_w[kParamRowLanes][kParamColumns + 1];
  __shared__ Acc partial_b[kParamRowLanes][kParamColumns + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kParamColumns + tx;
  Acc gw = 0, gb = 0;
  if (col < cols) {
    for (int64_t r = ty; r < rows; r += kParamRowLanes) {  // fixed order: deterministic
      const Acc g = E::to_acc(dy[r * cols + col]);
      gw += g * kernels::layer_norm_normalize(E::to_acc(x[r * cols + col]), Centered ? mean_in[r] : Acc(0), rstd_in[r]);
      gb += g;
    }
  }
  partial_w[ty][tx] = gw;
  partial_b[ty][tx] = gb;
  __syncthreads();
  if (ty == 0 && col < cols) {
    Acc total_w = 0, total_b = 0;
    for (int lane = 0; lane < kParamRowLanes; ++lane) {
      total_w += partial_w[lane][tx];
      total_b += partial_b[lane][tx];
    }
    if (dweight != nullptr) dweight[col] = E::from_acc(total_w);
    if (dbias != nullptr) dbias[col] = E::from_acc(total_b);
  }
}

template <bool Centered>
void norm_forward(kernels::KernelDType dtype, const void* x, const void* weight, const void* bias, double eps, void* y,
                  void* mean, void* rstd, int64_t rows, int64_t cols, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    using Acc = typename E::Acc;
    const std::size_t cache_bytes = static_cast<std::size_t>(cols) * sizeof(Acc);
    kernels::declare_launch_work(2.0 * rows * cols * sizeof(Storage));  // read x, write y (weights stay in cache)
    const bool cache_row = cache_bytes <= kRowCacheBytes;
    launch(Centered ? "layer_norm_forward_kernel" : "rms_norm_forward_kernel", layer_norm_forward_kernel<E, Centered>,
           dim3(static_cast<unsigned>(rows)), dim3(threads_for_row(cols)), cache_row ? cache_bytes : 0, stream,
           static_cast<const Storage*>(x), static_cast<const Storage*>(weight), static_cast<const Storage*>(bias),
           static_cast<Acc>(eps), static_cast<Storage*>(y), static_cast<Acc*>(mean), static_cast<Acc*>(rstd), cols,
           cache_row);
  });
}

template <bool Centered>
void norm_backward(kernels::KernelDType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                   const void* rstd, void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, Stream stream) {
  if (cols <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    using Acc = typename E::Acc;
    if (dx != nullptr && rows > 0) {
      kernels::declare_launch_work(3.0 * rows * cols * sizeof(Storage));  // read dy and x, write dx
      launch(Centered ? "layer_norm_backward_dx_kernel" : "rms_norm_backward_dx_kernel",
             layer_norm_backward_dx_kernel<E, Centered>, dim3(static_cast<unsigned>(rows)), dim3(threads_for_row(cols)),
             0, stream, static_cast<const Storage*>(dy), static_cast<const Storage*>(x),
             static_cast<const Storage*>(weight), static_cast<const Acc*>(mean), static_cast<const Acc*>(rstd),
             static_cast<Storage*>(dx), cols);
    }
    if (dweight != nullptr || dbias != nullptr) {                         // rows == 0 still writes zeros
      kernels::declare_launch_work(2.0 * rows * cols * sizeof(Storage));  // read dy and x
      launch(Centered ? "layer_norm_backward_params_kernel" : "rms_norm_backward_params_kernel",
             layer_norm_backward_params_kernel<E, Centered>,
             dim3(static_cast<unsigned>((cols + kParamColumns - 1) / kParamColumns)),
             dim3(kParamColumns, kParamRowLanes), 0, stream, static_cast<const Storage*>(dy),
             static_cast<const Storage*>(x), static_cast<const Acc*>(mean), static_cast<const Acc*>(rstd),
             static_cast<Storage*>(dweight), static_cast<Storage*>(dbias), rows, cols);
    }
  });
}

}  // namespace

void layer_norm_forward(kernels::KernelDType dtype, const void* x, const void* weight, const void* bias, double eps,
                        void* y, void* mean, void* rstd, int64_t rows, int64_t cols, Stream stream) {
  norm_forward<true>(dtype, x, weight, bias, eps, y, mean, rstd, rows, cols, stream);
}

void layer_norm_backward(kernels::KernelDType dtype, const void* dy, const void* x, const void* weight,
                         const void* mean, const void* rstd, void* dx, void* dweight, void* dbias, int64_t rows,
                         int64_t cols, Stream stream) {
  norm_backward<true>(dtype, dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols, stream);
}

void rms_norm_forward(kernels::KernelDType dtype, const void* x, const void* weight, double eps, void* y, void* rstd,
                      int64_t rows, int64_t cols, Stream stream) {
  norm_forward<false>(dtype, x, weight, nullptr, eps, y, nullptr, rstd, rows, cols, stream);
}

void rms_norm_backward(kernels::KernelDType dtype, const void* dy, const void* x, const void* weight, const void* rstd,
                       void* dx, void* dweight, int64_t rows, int64_t cols, Stream stream) {
  norm_backward<false>(dtype, dy, x, weight, nullptr, rstd, dx, dweight, nullptr, rows, cols, stream);
}

}  // namespace mt::MT_KERNEL_NS
