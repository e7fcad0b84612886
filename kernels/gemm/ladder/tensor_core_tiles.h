// What v4 and v5 share (private to kernels/gemm/ladder): the block/warp tiling
// for mma.sync m16n8k16, how a tile sits in shared memory for each layout,
// the ldmatrix addressing that turns it into fragments, and the epilogue.
//
// Block tile 128 (M) x 128 (N) x 32 (K), 8 warps as 2 (M) x 4 (N); each warp
// owns 64 x 32 outputs = 4 x 4 mma tiles of 16 x 8, i.e. 64 f32 accumulators
// per thread. Shared memory holds each operand in the layout global memory
// has, so every global read is a 16-byte chunk along a contiguous row:
//
//   A not transposed: [128 m][32 k]  -> ldmatrix_x4        (rows of m, k pairs)
//   A transposed:     [32 k][128 m]  -> ldmatrix_x4_trans  (transposes back)
//   B not transposed: [32 k][128 n]  -> ldmatrix_x4_trans  (k pairs per column)
//   B transposed:     [128 n][32 k]  -> ldmatrix_x4
//
// Every shared row is padded by 8 elements (16 bytes): the 8 row addresses of
// one ldmatrix then fall in different bank groups instead of the same one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/gemm/ladder/gemm_common.h"
#include "kernels/common/ptx.h"

namespace mt::MT_KERNEL_NS::tensor_core {

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 32;
constexpr int kWarpsM = 2, kWarpsN = 4, kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kBlockM / kWarpsM, kWarpN = kBlockN / kWarpsN;  // 64 x 32
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
constexpr int kTilesM = kWarpM / kMmaM, kTilesN = kWarpN / kMmaN;  // 4 x 4
constexpr int kPad = 8;

// Shared-memory footprint of one operand tile (the larger of its two layouts).
constexpr int kKMajorElements = kBlockK * (kBlockM + kPad);    // [32][136]
constexpr int kRowMajorElements = kBlockM * (kBlockK + kPad);  // [128][40]
constexpr int kOperandElements = kRowMajorElements > kKMajorElements ? kRowMajorElements : kKMajorElements;
constexpr int kStageElements = 2 * kOperandElements;  // A then B

// Leading dimension (in elements) of an operand tile in shared memory: rows
// of k ([m][k] or [n][k]) or rows of m / n ([k][m] or [k][n]).
constexpr int kLdAlongK = kBlockK + kPad;
constexpr int kLdAlongMN = kBlockM + kPad;
static_assert(kBlockM == kBlockN, "one padded row length serves A and B");

// Copies one operand tile into shared memory: `tile_rows` rows of `tile_cols`
// contiguous elements starting at global (row0, col0) of a row-major matrix
// with leading dimension ld; anything at or past (row_limit, col_limit) reads
// as zero. Each thread moves 16-byte chunks: with `Async` through cp.async
// (which zero-fills the missing tail of a partial chunk itself), else through
// a 16-byte register load. `vector_ok` says the chunks are 16-byte aligned
// (ld % 8 == 0 and an aligned base); otherwise elements go one at a time.
template <int TileRows, int TileCols, bool Async>
__device__ __forceinline__ void load_tile(std::uint16_t* shared, int shared_ld, const std::uint16_t* global, int64_t ld,
                                          int row0, int col0, int row_limit, int col_limit, bool vector_ok) {
  constexpr int kChunksPerRow = TileCols / 8;
  constexpr int kChunks = TileRows * kChunksPerRow;
  MT_UNROLL
  for (int chunk = static_cast<int>(threadIdx.x); chunk < kChunks; chunk += kThreads) {
    const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * 8;
    std::uint16_t* dst = shared + r * shared_ld + c;
    const int grow = row0 + r, gcol = col0 + c;
    int valid = grow < row_limit ? col_limit - gcol : 0;
    valid = valid < 0 ? 0 : (valid > 8 ? 8 : valid);
    const std::uint16_t* src = valid > 0 ? global + grow * ld + gcol : global;
    if (vector_ok && Async) {
      ptx::cp_async_cg16(dst, src, static_cast<unsigned>(valid * 2));
    } else if (vector_ok && valid == 8) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      MT_UNROLL
      for (int e = 0; e < 8; ++e) dst[e] = e < valid ? src[e] : std::uint16_t(0);
    }
  }
}

// Loads the A and B tiles for k-slice k0 of this block into one stage.
template <bool TransA, bool TransB, bool Async>
__device__ __forceinline__ void load_stage(std::uint16_t* stage, const kernels::GemmArgs& args, const std::uint16_t* a,
                                           const std::uint16_t* b, int block_row, int block_col, int k0,
                                           bool a_vector_ok, bool b_vector_ok) {
  std::uint16_t* a_shared = stage;
  std::uint16_t* b_shared = stage + kOperandElements;
  if (!TransA) {  // A stored [m][k]
    load_tile<kBlockM, kBlockK, Async>(a_shared, kLdAlongK, a, args.lda, block_row, k0, args.m, args.k, a_vector_ok);
  } else {  // A stored [k][m]
    load_tile<kBlockK, kBlockM, Async>(a_shared, kLdAlongMN, a, args.lda, k0, block_row, args.k, args.m, a_vector_ok);
  }
  if (!TransB) {  // B stored [k][n]
    load_tile<kBlockK, kBlockN, Async>(b_shared, kLdAlongMN, b, args.ldb, k0, block_col, args.k, args.n, b_vector_ok);
  } else {  // B stored [n][k]
    load_tile<kBlockN, kBlockK, Async>(b_shared, kLdAlongK, b, args.ldb, block_col, k0, args.n, args.k, b_vector_ok);
  }
}

template <typename E>
__device__ __forceinline__ void mma(float (&acc)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<E, element::BF16>) {
    ptx::mma_m16n8k16_bf16(acc, a, b, acc);
  } else {
    ptx::mma_m16n8k16_f16(acc, a, b, acc);
  }
}

// One k16 step of a warp: ldmatrix the fragments of its 4 A tiles and 4 B
// tiles from the stage, then 16 mma.sync.
template <typename E, bool TransA, bool TransB>
__device__ __forceinline__ void warp_mma_k16(const std::uint16_t* stage, int kk, int warp_row, int warp_col,
                                             float (&acc)[kTilesM][kTilesN][4]) {
  const std::uint16_t* a_shared = stage;
  const std::uint16_t* b_shared = stage + kOperandElements;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int matrix = lane / 8, row_in_matrix = lane % 8;
  std::uint32_t a_frag[kTilesM][4];
  std::uint32_t b_frag[kTilesN][2];
  MT_UNROLL
  for (int i = 0; i < kTilesM; ++i) {
    const int m0 = warp_row + i * kMmaM;
    if (!TransA) {
      // Matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15): lane -> its row.
      ptx::ldmatrix_x4(a_frag[i], a_shared + (m0 + lane % 16) * kLdAlongK + kk + (lane / 16) * 8);
    } else {
      // Stored rows are k: the same four matrices, each transposed on the way out.
      ptx::ldmatrix_x4_trans(a_frag[i],
                             a_shared + (kk + row_in_matrix + (matrix / 2) * 8) * kLdAlongMN + m0 + (matrix % 2) * 8);
    }
  }
  MT_UNROLL
  for (int j = 0; j < kTilesN; j += 2) {
    const int n0 = warp_col + j * kMmaN;
    std::uint32_t r[4];
    if (!TransB) {
      // Stored rows are k: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
      ptx::ldmatrix_x4_trans(r,
                             b_shared + (kk + row_in_matrix + (matrix % 2) * 8) * kLdAlongMN + n0 + (matrix / 2) * 8);
    } else {
      // Stored rows are n, k contiguous: the same four matrices without a transpose.
      ptx::ldmatrix_x4(r, b_shared + (n0 + row_in_matrix + (matrix / 2) * 8) * kLdAlongK + kk + (matrix % 2) * 8);
    }
    b_frag[j][0] = r[0];
    b_frag[j][1] = r[1];
    b_frag[j + 1][0] = r[2];
    b_frag[j + 1][1] = r[3];
  }
  MT_UNROLL
  for (int i = 0; i < kTilesM; ++i) {
    MT_UNROLL
    for (int j = 0; j < kTilesN; ++j) mma<E>(acc[i][j], a_frag[i], b_frag[j]);
  }
}

// Accumulator fragment -> C: c[0..1] = C[group][2t..2t+1], c[2..3] = C[group + 8][...].
template <typename E>
__device__ __forceinline__ void store_accumulators(const kernels::GemmArgs& args, int batch, int warp_row, int warp_col,
                                                   const float (&acc)[kTilesM][kTilesN][4]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int group = lane / 4, t = lane % 4;
  MT_UNROLL
  for (int i = 0; i < kTilesM; ++i) {
    MT_UNROLL
    for (int j = 0; j < kTilesN; ++j) {
      const int row = warp_row + i * kMmaM + group;
      const int col = warp_col + j * kMmaN + 2 * t;
      gemm_detail::store_output<E>(args, batch, row, col, acc[i][j][0]);
      gemm_detail::store_output<E>(args, batch, row, col + 1, acc[i][j][1]);
      gemm_detail::store_output<E>(args, batch, row + 8, col, acc[i][j][2]);
      gemm_detail::store_output<E>(args, batch, row + 8, col + 1, acc[i][j][3]);
    }
  }
}

// Host: may an operand be read in aligned 16-byte chunks?
inline bool vector_loads_ok(const void* base, int64_t ld, int64_t batch_stride, int batch) {
  return reinterpret_cast<std::uintptr_t>(base) % 16 == 0 && ld % 8 == 0 && (batch <= 1 || batch_stride % 8 == 0);
}

// Host: launches Kernel<E, TransA, TransB> for the layout of args (f16/bf16 only).
template <template <typename, bool, bool> class KernelFor>
void launch_for_layout(const char* name, const kernels::GemmArgs& args, std::size_t shared_bytes,
                       kernels::Stream stream) {
  if (args.dtype != kernels::KernelDType::F16 && args.dtype != kernels::KernelDType::BF16) {
    throw std::invalid_argument(std::string(name) + ": Tensor Core GEMM takes f16 or bf16, got " +
                                kernels::kernel_dtype_name(args.dtype));
  }
  const dim3 grid(gemm_detail::ceil_div(args.n, kBlockN), gemm_detail::ceil_div(args.m, kBlockM), args.batch);
  const bool a_ok = vector_loads_ok(args.a, args.lda, args.batch_stride_a, args.batch);
  const bool b_ok = vector_loads_ok(args.b, args.ldb, args.batch_stride_b, args.batch);
  auto go = [&](auto tag) {
    using E = decltype(tag);
    auto run = [&](auto kernel) { launch(name, kernel, grid, dim3(kThreads), shared_bytes, stream, args, a_ok, b_ok); };
    if (!args.trans_a && !args.trans_b) run(KernelFor<E, false, false>::get());
    if (!args.trans_a && args.trans_b) run(KernelFor<E, false, true>::get());
    if (args.trans_a && !args.trans_b) run(KernelFor<E, true, false>::get());
    if (args.trans_a && args.trans_b) run(KernelFor<E, true, true>::get());
  };
  if (args.dtype == kernels::KernelDType::F16) {
    go(element::F16{});
  } else {
    go(element::BF16{});
  }
}

}  // namespace mt::MT_KERNEL_NS::tensor_core
