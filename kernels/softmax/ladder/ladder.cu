// The softmax ladder: the same row softmax written four ways, from the
// obvious kernel to the production one, each runnable on its own
// (softmax_ladder_forward) and benchmarked side by side (bench/bandwidth_bench).
// Softmax moves 2 bytes per element for every few flops: the whole game is
// how much of the memory bandwidth each rung reaches.
//
//   v1 thread per row   one thread walks its row three times (max, sum,
//                       write). Neighbouring threads read addresses a row
//                       apart, so no load is coalesced, and a grid of
//                       rows / 128 blocks leaves the GPU idle for few rows.
//   v2 warp per row     32 lanes stride the row together (coalesced), keep
//                       a running (max, sum of exp(x - max)) each — the
//                       one-pass "online softmax" — merged with shuffles;
//                       then one more pass writes: two reads, one write.
//   v3 vector loads     v2 with 16-byte loads and stores (8 f16/bf16 or 4
//                       f32 per instruction, 4x-8x fewer memory
//                       instructions) and the row held in registers when it
//                       fits (up to 8 vectors per lane: 2048 f16 or 1024 f32
//                       values), so global memory is read once.
//   v4 block per row    the production kernel (../cuda.cu): a block per
//                       row, for rows too long for one warp, cached in
//                       shared memory.
//
// Precision, every rung: inputs widen to f32, max and sum are f32, each
// output is rounded once; exp(x - max) / sum, never exp(x - lse).
// Speed: not measured yet on a GPU; bench/bandwidth_bench prints every rung.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/block_reduce.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"
#include "kernels/common/row_vectors.h"
#include "kernels/softmax/api.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace rowwise;

constexpr int kWarpsPerBlock = 4;  // v2, v3: one row per warp
constexpr int kMaxVectorsPerLane = 8;

template <typename E>
__global__ void v1_thread_per_row(const typename E::Storage* in, typename E::Storage* out, int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const typename E::Storage* x = in + row * cols;
  float max = negative_infinity<float>(), sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) max = fmaxf(max, E::to_acc(x[c]));
  for (int64_t c = 0; c < cols; ++c) sum += acc_exp(E::to_acc(x[c]) - max);
  const float inv_sum = 1.0f / sum;
  for (int64_t c = 0; c < cols; ++c) out[row * cols + c] = E::from_acc(acc_exp(E::to_acc(x[c]) - max) * inv_sum);
}

__device__ __forceinline__ MaxSum<float> warp_max_sum(MaxSum<float> s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    s = combine(
        s, MaxSum<float>{__shfl_xor_sync(0xffffffffu, s.max, offset), __shfl_xor_sync(0xffffffffu, s.sum, offset)});
  }
  return s;
}

template <typename E>
__global__ void v2_warp_per_row(const typename E::Storage* in, typename E::Storage* out, int64_t rows, int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // a whole warp leaves together
  const typename E::Storage* x = in + row * cols;
  MaxSum<float> s{negative_infinity<float>(), 0.0f};
  for (int64_t c = lane; c < cols; c += 32) accumulate(s, E::to_acc(x[c]));
  s = warp_max_sum(s);
  const float inv_sum = 1.0f / s.sum;
  for (int64_t c = lane; c < cols; c += 32)
    out[row * cols + c] = E::from_acc(acc_exp(E::to_acc(x[c]) - s.max) * inv_sum);
}

// cols is a multiple of the vector width and rows start 16-byte aligned
// (the dispatcher checks). Rows of up to kMaxVectorsPerLane vectors per lane
// stay in registers between the statistics and the write; longer rows are
// read twice.
template <typename E>
__global__ void v3_vector_loads(const typename E::Storage* in, typename E::Storage* out, int64_t rows, int64_t cols) {
  constexpr int kWidth = Vector<E>::kElements;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const typename E::Storage* x = in + row * cols;
  const int64_t vectors = cols / kWidth;
  const bool in_registers = vectors <= 32 * kMaxVectorsPerLane;
  Vector<E> held[kMaxVectorsPerLane];
  MaxSum<float> s{negative_infinity<float>(), 0.0f};
  for (int64_t vi = lane, k = 0; vi < vectors; vi += 32, ++k) {
    const Vector<E> v = load_vector<E>(x + vi * kWidth);
    if (in_registers) held[k] = v;
    MT_UNROLL
    for (int e = 0; e < kWidth; ++e) accumulate(s, E::to_acc(v.values[e]));
  }
  s = warp_max_sum(s);
  const float inv_sum = 1.0f / s.sum;
  for (int64_t vi = lane, k = 0; vi < vectors; vi += 32, ++k) {
    Vector<E> v = in_registers ? held[k] : load_vector<E>(x + vi * kWidth);
    MT_UNROLL
    for (int e = 0; e < kWidth; ++e) v.values[e] = E::from_acc(acc_exp(E::to_acc(v.values[e]) - s.max) * inv_sum);
    store_vector<E>(out + row * cols + vi * kWidth, v);
  }
}

template <typename E>
void launch_rung(kernels::SoftmaxRung rung, const void* in_bytes, void* out_bytes, int64_t rows, int64_t cols,
                 Stream stream) {
  using S = typename E::Storage;
  const auto* in = static_cast<const S*>(in_bytes);
  auto* out = static_cast<S*>(out_bytes);
  const auto warp_blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  switch (rung) {
    case kernels::SoftmaxRung::V1ThreadPerRow:
      launch("softmax_v1_thread_per_row", v1_thread_per_row<E>, dim3(static_cast<unsigned>((rows + 127) / 128)),
             dim3(128), 0, stream, in, out, rows, cols);
      return;
    case kernels::SoftmaxRung::V2WarpPerRow:
      launch("softmax_v2_warp_per_row", v2_warp_per_row<E>, dim3(warp_blocks), dim3(32 * kWarpsPerBlock), 0, stream, in,
             out, rows, cols);
      return;
    case kernels::SoftmaxRung::V3VectorLoads:
      launch("softmax_v3_vector_loads", v3_vector_loads<E>, dim3(warp_blocks), dim3(32 * kWarpsPerBlock), 0, stream, in,
             out, rows, cols);
      return;
    case kernels::SoftmaxRung::V4BlockPerRow: return;  // ../cuda.cu's kernel: called below
  }
}

}  // namespace

void softmax_ladder_forward(kernels::SoftmaxRung rung, kernels::KernelDType dtype, const void* in, void* out,
                            int64_t rows, int64_t cols, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  if (rung == kernels::SoftmaxRung::V4BlockPerRow || dtype == kernels::KernelDType::F64) {
    return softmax_forward(dtype, in, out, rows, cols, false, stream);
  }
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, element::F64>) {
      // v3's 16-byte vectors need whole vectors per row and aligned rows; otherwise v2.
      const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
      const bool vectors_fit = cols % Vector<E>::kElements == 0 && aligned(in) && aligned(out);
      if (rung == kernels::SoftmaxRung::V3VectorLoads && !vectors_fit) rung = kernels::SoftmaxRung::V2WarpPerRow;
      launch_rung<E>(rung, in, out, rows, cols, stream);
    }
  });
}

}  // namespace mt::MT_KERNEL_NS
