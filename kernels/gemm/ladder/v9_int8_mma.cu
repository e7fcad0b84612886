// GEMM ladder, version 9: INT8 on the Tensor Cores (mma.sync m16n8k32).
//
// What: INT8 inference's GEMM (kernels/gemm/api.h, Int8Gemm): u8 activations
//   A [m, k] with one zero point, s8 weights B [n, k] (a Linear's weight, as
//   stored), out[m, n] = act(scales[n] * sum_k (A[m,k] - z) B[n,k] + bias[n])
//   in f32 or bf16. The same formula as the CPU's kernels/gemm/int8.cpp.
// Algorithm: a 128-thread block owns a 64x32 tile of out; warp w its rows
//   16w..16w+15, as four 16x8 mma tiles. Per 32-wide k-slice each lane loads
//   its fragments straight from global memory, one 32-bit word per register
//   (four consecutive k of a row of A or of B: both are K-contiguous, which
//   is exactly the "row.col" layout mma wants, so no transposition and no
//   ldmatrix), then issues four mma.sync.m16n8k32.u8.s8: 16x8x32 products
//   per instruction, 8x the k of v4's f16 mma at the same issue rate. The
//   zero point is not subtracted per element: sum (a - z) b = sum a b -
//   z sum b, and each lane also sums the weight bytes it loads (a column's
//   sum, reduced over the column's four lanes with two shuffles).
// Precision: exact. u8 x s8 products summed in s32 inside the Tensor Core
//   (no K mixtape runs comes near 2^31 / (255 * 128) = 65,793); the one
//   inexact step is the epilogue: s32 -> f32, the scale, the bias, the
//   activation, and the rounding into out, as on the CPU.
// Bound: global-memory latency. Nothing is staged in shared memory, so
//   every warp reads its own copy of B's tile and the block's four warps
//   re-read it from L1; no loads overlap the math. It is the first INT8
//   rung: shared-memory tiles and a cp.async pipeline (v4 -> v5's steps)
//   are what come next. Ragged edges: an M or N past the tile's end loads
//   zeros and stores nothing; a K past the end loads zero weights, whose
//   products vanish whatever A holds.
// Speed: not measured: no GPU has run it yet (tested on the simulator only).
#include "kernels/common/ptx.h"
#include "kernels/gemm/ladder/gemm_common.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kWarps = 4;
constexpr int kBlockM = 16 * kWarps;  // 64
constexpr int kTilesN = 4;
constexpr int kBlockN = 8 * kTilesN;  // 32
constexpr int kK = 32;                // one mma's k

// Four consecutive bytes of a K-contiguous row starting at `col`, bytes past
// the row's end (or a row past the matrix) zero. `aligned`: every row starts
// 4-byte aligned, so an in-range word is one 32-bit load.
__device__ __forceinline__ std::uint32_t load4(const std::uint8_t* row, bool row_in_range, std::int64_t col,
                                               std::int64_t k, bool aligned) {
  if (!row_in_range) return 0u;
  if (aligned && col + 3 < k) return *reinterpret_cast<const std::uint32_t*>(row + col);
  std::uint32_t word = 0;
  for (int byte = 0; byte < 4; ++byte) {
    if (col + byte < k) word |= static_cast<std::uint32_t>(row[col + byte]) << (8 * byte);
  }
  return word;
}

// The signed sum of a word's four s8 bytes.
__device__ __forceinline__ std::int32_t byte_sum(std::uint32_t word) {
  std::int32_t sum = 0;
  for (int byte = 0; byte < 4; ++byte) sum += static_cast<std::int8_t>(static_cast<std::uint8_t>(word >> (8 * byte)));
  return sum;
}

template <bool OutBf16>
__global__ void __launch_bounds__(kWarps * 32) int8_gemm_v9_kernel(kernels::Int8Gemm g, void* out, bool aligned) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int group = lane / 4, t = lane % 4;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kBlockM + 16 * warp;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kBlockN;
  // This lane's two rows of A and its column of B in each n8 tile.
  const std::int64_t row_lo = row0 + group, row_hi = row_lo + 8;
  const std::uint8_t* a_lo = g.a + row_lo * g.k;
  const std::uint8_t* a_hi = g.a + row_hi * g.k;
  const std::uint8_t* b_rows[kTilesN];
  bool b_in_range[kTilesN];
  for (int j = 0; j < kTilesN; ++j) {
    const std::int64_t n = col0 + 8 * j + group;
    b_in_range[j] = n < g.n;
    b_rows[j] = reinterpret_cast<const std::uint8_t*>(g.b) + n * g.k;
  }

  std::int32_t acc[kTilesN][4] = {};
  std::int32_t column_sum[kTilesN] = {};
  for (std::int64_t k0 = 0; k0 < g.k; k0 += kK) {
    const std::int64_t lo = k0 + 4 * t, hi = lo + 16;
    const std::uint32_t a[4] = {
        load4(a_lo, row_lo < g.m, lo, g.k, aligned), load4(a_hi, row_hi < g.m, lo, g.k, aligned),
        load4(a_lo, row_lo < g.m, hi, g.k, aligned), load4(a_hi, row_hi < g.m, hi, g.k, aligned)};
    MT_UNROLL
    for (int j = 0; j < kTilesN; ++j) {
      const std::uint32_t b[2] = {load4(b_rows[j], b_in_range[j], lo, g.k, aligned),
                                  load4(b_rows[j], b_in_range[j], hi, g.k, aligned)};
      column_sum[j] += byte_sum(b[0]) + byte_sum(b[1]);
      ptx::mma_m16n8k32_u8s8(acc[j], a, b, acc[j]);
    }
  }
  // Column (8j + group)'s weight sum, from the four lanes that loaded it.
  MT_UNROLL
  for (int j = 0; j < kTilesN; ++j) {
    column_sum[j] += __shfl_xor_sync(0xffffffffu, column_sum[j], 1);
    column_sum[j] += __shfl_xor_sync(0xffffffffu, column_sum[j], 2);
  }
  MT_UNROLL
  for (int j = 0; j < kTilesN; ++j) {
    // This lane's outputs sit in columns 2t and 2t + 1 of tile j: their sums
    // live in the lanes of groups 2t and 2t + 1.
    const std::int32_t sums[2] = {__shfl_sync(0xffffffffu, column_sum[j], (2 * t) * 4),
                                  __shfl_sync(0xffffffffu, column_sum[j], (2 * t + 1) * 4)};
    for (int i = 0; i < 4; ++i) {
      const std::int64_t row = i < 2 ? row_lo : row_hi, col = col0 + 8 * j + 2 * t + (i & 1);
      if (row >= g.m || col >= g.n) continue;
      gemm_detail::store_int8_output<OutBf16>(g, row, col, acc[j][i] - g.a_zero_point * sums[i & 1], out);
    }
  }
}

}  // namespace

void int8_gemm_v9_mma(const kernels::Int8Gemm& g, void* out, bool out_bf16, Stream stream) {
  // grid.y counts blocks of 64 rows: at most 65535 of them.
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.m > std::int64_t{65535} * kBlockM || g.n > (std::int64_t{1} << 31)) {
    throw std::invalid_argument("int8_gemm_v9_mma: sizes out of range (m=" + std::to_string(g.m) +
                                ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) + ")");
  }
  if (g.m > 0 && g.n > 0 && (g.a == nullptr || g.b == nullptr || g.scales == nullptr || out == nullptr)) {
    throw std::invalid_argument("int8_gemm_v9_mma: a null operand");
  }
  if (g.m == 0 || g.n == 0) return;
  const bool aligned =
      g.k % 4 == 0 && reinterpret_cast<std::uintptr_t>(g.a) % 4 == 0 && reinterpret_cast<std::uintptr_t>(g.b) % 4 == 0;
  const dim3 grid(static_cast<unsigned>((g.n + kBlockN - 1) / kBlockN),
                  static_cast<unsigned>((g.m + kBlockM - 1) / kBlockM));
  kernels::declare_launch_work(static_cast<double>(g.m * g.k + g.n * g.k) +
                               static_cast<double>(g.m * g.n) * (out_bf16 ? 2.0 : 4.0));
  if (out_bf16) {
    launch("int8_gemm_v9_kernel", int8_gemm_v9_kernel<true>, grid, dim3(kWarps * 32), 0, stream, g, out, aligned);
  } else {
    launch("int8_gemm_v9_kernel", int8_gemm_v9_kernel<false>, grid, dim3(kWarps * 32), 0, stream, g, out, aligned);
  }
}

}  // namespace mt::MT_KERNEL_NS
