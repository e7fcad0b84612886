// The layer_norm ladder: LayerNorm's forward written four ways, from the
// obvious kernel to the production one, each runnable on its own
// (layer_norm_ladder_forward) and benchmarked side by side
// (bench/bandwidth_bench). Like softmax it moves 2 bytes per element (read x,
// write y) for a handful of flops, so each rung is judged by the bandwidth it
// reaches; what differs from softmax is the statistic: a mean and a variance.
//
//   v1 thread per row   one thread walks its row three times (mean, squared
//                       deviations, write). Neighbouring threads read
//                       addresses a row apart: no load is coalesced.
//   v2 warp per row     32 lanes stride the row together (coalesced). Each
//                       lane keeps Welford's running (count, mean, M2) — the
//                       one-pass statistics, free of E[x^2] - E[x]^2's
//                       cancellation — and the lanes merge theirs with
//                       shuffles (Chan's pairwise formula); one more pass
//                       writes: two reads, one write.
//   v3 vector loads     v2 with 16-byte loads and stores (8 f16/bf16 or 4
//                       f32 per instruction) and the row held in registers
//                       when it fits (up to 8 vectors per lane: 2048 f16 or
//                       1024 f32 values), so global memory is read once.
//   v4 block per row    the production kernel (../cuda.cu): a block per
//                       row, the row cached in shared memory, two-pass
//                       statistics from the cache; it also serves rows too
//                       long for one warp.
//
// Precision, every rung: inputs widen to f32; count, mean, M2 and rstd are
// f32; biased variance as LayerNorm defines it; each output rounded once.
// Welford's update divides once per element: cheap next to a global load,
// and the price of reading the row only once.
// Speed: not measured yet on a GPU; bench/bandwidth_bench prints every rung.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/block_reduce.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"
#include "kernels/common/row_vectors.h"
#include "kernels/layer_norm/api.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace rowwise;

constexpr int kWarpsPerBlock = 4;  // v2, v3: one row per warp
constexpr int kMaxVectorsPerLane = 8;

// Welford's running statistics of the values seen so far.
struct Moments {
  float count = 0, mean = 0, m2 = 0;  // m2: sum of squared deviations from mean
};

__device__ __forceinline__ void accumulate(Moments& m, float x) {
  m.count += 1.0f;
  const float delta = x - m.mean;
  m.mean += delta / m.count;
  m.m2 += delta * (x - m.mean);
}

// Chan et al.'s merge of two partial statistics (either may be empty).
__device__ __forceinline__ Moments merge(Moments a, Moments b) {
  if (b.count == 0) return a;
  if (a.count == 0) return b;
  const float count = a.count + b.count, delta = b.mean - a.mean, share = b.count / count;
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

__device__ __forceinline__ Moments warp_moments(Moments m) {
  for (int offset = 16; offset > 0; offset /= 2) {
    m = merge(m, Moments{__shfl_xor_sync(0xffffffffu, m.count, offset), __shfl_xor_sync(0xffffffffu, m.mean, offset),
                         __shfl_xor_sync(0xffffffffu, m.m2, offset)});
  }
  return m;
}

// The normalised, affine value of element `c`.
template <typename E>
__device__ __forceinline__ float normalized(float x, float mean, float rstd, const typename E::Storage* weight,
                                            const typename E::Storage* bias, int64_t c) {
  float v = (x - mean) * rstd;
  if (weight != nullptr) v *= E::to_acc(weight[c]);
  if (bias != nullptr) v += E::to_acc(bias[c]);
  return v;
}

template <typename E>
struct Row {
  const typename E::Storage* x;
  const typename E::Storage* weight;
  const typename E::Storage* bias;
  typename E::Storage* y;
  float* mean;
  float* rstd;
  int64_t rows, cols;
  float eps;
};

template <typename E>
__global__ void v1_thread_per_row(Row<E> p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= p.rows) return;
  const typename E::Storage* x = p.x + row * p.cols;
  float sum = 0.0f;
  for (int64_t c = 0; c < p.cols; ++c) sum += E::to_acc(x[c]);
  const float mean = sum / static_cast<float>(p.cols);
  float squares = 0.0f;
  for (int64_t c = 0; c < p.cols; ++c) {
    const float d = E::to_acc(x[c]) - mean;
    squares += d * d;
  }
  const float rstd = acc_rsqrt(squares / static_cast<float>(p.cols) + p.eps);
  for (int64_t c = 0; c < p.cols; ++c)
    p.y[row * p.cols + c] = E::from_acc(normalized<E>(E::to_acc(x[c]), mean, rstd, p.weight, p.bias, c));
  p.mean[row] = mean;
  p.rstd[row] = rstd;
}

// Lane 0 writes the row's saved statistics; returns rstd.
__device__ __forceinline__ float finish_statistics(const Moments& m, float eps, float* mean_out, float* rstd_out,
                                                   int64_t row, int lane) {
  const float rstd = acc_rsqrt(m.m2 / m.count + eps);
  if (lane == 0) {
    mean_out[row] = m.mean;
    rstd_out[row] = rstd;
  }
  return rstd;
}

template <typename E>
__global__ void v2_warp_per_row(Row<E> p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.rows) return;  // a whole warp leaves together
  const typename E::Storage* x = p.x + row * p.cols;
  Moments m;
  for (int64_t c = lane; c < p.cols; c += 32) accumulate(m, E::to_acc(x[c]));
  m = warp_moments(m);
  const float rstd = finish_statistics(m, p.eps, p.mean, p.rstd, row, lane);
  for (int64_t c = lane; c < p.cols; c += 32)
    p.y[row * p.cols + c] = E::from_acc(normalized<E>(E::to_acc(x[c]), m.mean, rstd, p.weight, p.bias, c));
}

// cols is a multiple of the vector width and rows start 16-byte aligned (the
// dispatcher checks). Rows of up to kMaxVectorsPerLane vectors per lane stay
// in registers between the statistics and the write; longer rows are read
// twice. Weight and bias are read with scalar loads (they are shared by every
// row and stay in cache).
template <typename E>
__global__ void v3_vector_loads(Row<E> p) {
  constexpr int kWidth = Vector<E>::kElements;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.rows) return;
  const typename E::Storage* x = p.x + row * p.cols;
  const int64_t vectors = p.cols / kWidth;
  const bool in_registers = vectors <= 32 * kMaxVectorsPerLane;
  Vector<E> held[kMaxVectorsPerLane];
  Moments m;
  for (int64_t vi = lane, k = 0; vi < vectors; vi += 32, ++k) {
    const Vector<E> v = load_vector<E>(x + vi * kWidth);
    if (in_registers) held[k] = v;
    MT_UNROLL
    for (int e = 0; e < kWidth; ++e) accumulate(m, E::to_acc(v.values[e]));
  }
  m = warp_moments(m);
  const float rstd = finish_statistics(m, p.eps, p.mean, p.rstd, row, lane);
  for (int64_t vi = lane, k = 0; vi < vectors; vi += 32, ++k) {
    Vector<E> v = in_registers ? held[k] : load_vector<E>(x + vi * kWidth);
    MT_UNROLL
    for (int e = 0; e < kWidth; ++e) {
      v.values[e] = E::from_acc(normalized<E>(E::to_acc(v.values[e]), m.mean, rstd, p.weight, p.bias, vi * kWidth + e));
    }
    store_vector<E>(p.y + row * p.cols + vi * kWidth, v);
  }
}

template <typename E>
void launch_rung(kernels::LayerNormRung rung, const Row<E>& p, Stream stream) {
  const auto warp_blocks = static_cast<unsigned>((p.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  switch (rung) {
    case kernels::LayerNormRung::V1ThreadPerRow:
      launch("layer_norm_v1_thread_per_row", v1_thread_per_row<E>, dim3(static_cast<unsigned>((p.rows + 127) / 128)),
             dim3(128), 0, stream, p);
      return;
    case kernels::LayerNormRung::V2WarpPerRow:
      launch("layer_norm_v2_warp_per_row", v2_warp_per_row<E>, dim3(warp_blocks), dim3(32 * kWarpsPerBlock), 0, stream,
             p);
      return;
    case kernels::LayerNormRung::V3VectorLoads:
      launch("layer_norm_v3_vector_loads", v3_vector_loads<E>, dim3(warp_blocks), dim3(32 * kWarpsPerBlock), 0, stream,
             p);
      return;
    case kernels::LayerNormRung::V4BlockPerRow: return;  // ../cuda.cu's kernel: called below
  }
}

}  // namespace

void layer_norm_ladder_forward(kernels::LayerNormRung rung, kernels::KernelDType dtype, const void* x,
                               const void* weight, const void* bias, double eps, void* y, void* mean, void* rstd,
                               int64_t rows, int64_t cols, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  if (rung == kernels::LayerNormRung::V4BlockPerRow || dtype == kernels::KernelDType::F64) {
    return layer_norm_forward(dtype, x, weight, bias, eps, y, mean, rstd, rows, cols, stream);
  }
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, element::F64>) {
      using S = typename E::Storage;
      const Row<E> p{static_cast<const S*>(x), static_cast<const S*>(weight), static_cast<const S*>(bias),
                     static_cast<S*>(y),       static_cast<float*>(mean),     static_cast<float*>(rstd),
                     rows,                     cols,                          static_cast<float>(eps)};
      // v3's 16-byte vectors need whole vectors per row and aligned rows; otherwise v2.
      const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
      const bool vectors_fit = cols % Vector<E>::kElements == 0 && aligned(x) && aligned(y);
      launch_rung<E>(rung == kernels::LayerNormRung::V3VectorLoads && !vectors_fit ? kernels::LayerNormRung::V2WarpPerRow
                                                                                   : rung,
                     p, stream);
    }
  });
}

}  // namespace mt::MT_KERNEL_NS
