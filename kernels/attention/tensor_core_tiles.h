// The mma.sync building blocks of the v3 attention kernels (private to
// kernels/attention): how a tile sits in shared memory, and the two
// products every v3 kernel is made of, for one warp's 16 rows:
//
//   scores_against(s, a, tile)   s[16 x 32]  = A[16 x D] . tile[32 x D]^T
//   accumulate_product(o, p, tile) o[16 x D] += P[16 x 32] . tile[32 x D]
//
// Forward: S = Q K^T, O += P V. Backward by keys: S^T = K Q^T, dP^T = V dO^T,
// dV += P^T dO, dK += dS^T Q. Backward by queries: S = Q K^T, dP = dO V^T,
// dQ += dS K. Every operand tile is stored [row][d], as global memory has
// it, padded by 8 elements per row so the 8 row addresses of one ldmatrix
// fall in different banks.
//
// Fragments (kernels/common/ptx.h): each thread holds rows group and group + 8
// (group = lane / 4) of a 16-row result and, per 8-column n-tile, columns
// 2 * (lane % 4) and the next; c[0..1] are row group, c[2..3] row group + 8.
// Two adjacent 16 x 8 accumulator tiles are exactly one 16 x 16 A fragment,
// so P (or dS) feeds the next product straight from registers, rounded to
// the input dtype.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/attention/flash_common.h"
#include "kernels/common/ptx.h"

namespace mt::MT_KERNEL_NS::attention::tensor_core {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpRows = 16;            // rows of a warp's fragment
constexpr int kBlockRows = 16 * kWarps;  // rows a block owns (queries forward, keys in backward)
constexpr int kTileRows = 32;            // rows of the streamed operand per step: 4 n-tiles of s
constexpr int kPad = 8;

template <int D>
using Tile = std::uint16_t[D + kPad];  // one padded row

template <typename E>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<E, element::F16>) {
    ptx::mma_m16n8k16_f16(d, a, b, d);
  } else {
    ptx::mma_m16n8k16_bf16(d, a, b, d);
  }
}

// Copies rows [first, first + Rows) of a [length, D] head slice into a padded
// shared tile, 16 bytes at a time; rows past the end read as zeros (a NaN
// left in shared memory would survive a zero probability in a product).
template <int Rows, int D>
__device__ __forceinline__ void load_tile(Tile<D>* tile, const std::uint16_t* head, int64_t first, int64_t length) {
  constexpr int kChunksPerRow = D / 8;
  for (int chunk = threadIdx.x; chunk < Rows * kChunksPerRow; chunk += kThreads) {
    const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + r < length) value = *reinterpret_cast<const uint4*>(head + (first + r) * D + c);
    std::uint16_t* destination = &tile[r][c];
    *reinterpret_cast<uint4*>(destination) = value;
  }
}

// The A fragments of rows [row0, row0 + 16) of a shared tile, all D columns.
template <int D>
__device__ __forceinline__ void load_a_fragments(std::uint32_t (&a)[D / 16][4], const Tile<D>* tile, int row0) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  MT_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) ptx::ldmatrix_x4(a[kk], &tile[row0 + lane % 16][kk * 16 + 8 * (lane / 16)]);
}

// The A fragments of this warp's 16 rows of two [length, D] head slices (the
// block's rows first .. first + 63), staged one after the other through one
// shared tile: K and V for the backward by keys, Q and dO by queries.
template <int D>
__device__ __forceinline__ void load_block_fragments(std::uint32_t (&a)[D / 16][4], std::uint32_t (&b)[D / 16][4],
                                                     Tile<D>* staging, const std::uint16_t* head_a,
                                                     const std::uint16_t* head_b, int64_t first, int64_t length) {
  const int warp_row0 = static_cast<int>(threadIdx.x) / 32 * kWarpRows;
  load_tile<kBlockRows, D>(staging, head_a, first, length);
  __syncthreads();
  load_a_fragments<D>(a, staging, warp_row0);
  __syncthreads();
  load_tile<kBlockRows, D>(staging, head_b, first, length);
  __syncthreads();
  load_a_fragments<D>(b, staging, warp_row0);
}

// s = A . tile^T for the warp's 16 rows and the tile's 32 rows: the tile is
// [row][d], which is B's "col" layout (consecutive d per column), so plain
// ldmatrix_x4 yields two n-tiles' fragments at once.
template <typename E, int D>
__device__ __forceinline__ void scores_against(float (&s)[4][4], const std::uint32_t (&a)[D / 16][4],
                                               const Tile<D>* tile) {
  const int lane = static_cast<int>(threadIdx.x) % 32, matrix = lane / 8, matrix_row = lane % 8;
  MT_UNROLL
  for (int nt = 0; nt < 4; ++nt) {
    MT_UNROLL
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
  }
  MT_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    MT_UNROLL
    for (int pair = 0; pair < 2; ++pair) {
      std::uint32_t b4[4];
      ptx::ldmatrix_x4(b4, &tile[pair * 16 + (matrix / 2) * 8 + matrix_row][kk * 16 + (matrix % 2) * 8]);
      const std::uint32_t b_lo[2] = {b4[0], b4[1]}, b_hi[2] = {b4[2], b4[3]};
      mma<E>(s[2 * pair], a[kk], b_lo);
      mma<E>(s[2 * pair + 1], a[kk], b_hi);
    }
  }
}

// o += p . tile for the warp's 16 rows: p (f32 accumulators over the tile's
// 32 rows) becomes two A fragments, rounded to E; the tile is [row][d], so
// ldmatrix_x4.trans gives B fragments (consecutive rows per column).
template <typename E, int D>
__device__ __forceinline__ void accumulate_product(float (&o)[D / 8][4], const float (&p)[4][4], const Tile<D>* tile) {
  const int lane = static_cast<int>(threadIdx.x) % 32, matrix = lane / 8, matrix_row = lane % 8;
  MT_UNROLL
  for (int kk = 0; kk < kTileRows / 16; ++kk) {
    const std::uint32_t a[4] = {
        ptx::pack_halves(E::from_acc(p[2 * kk][0]), E::from_acc(p[2 * kk][1])),
        ptx::pack_halves(E::from_acc(p[2 * kk][2]), E::from_acc(p[2 * kk][3])),
        ptx::pack_halves(E::from_acc(p[2 * kk + 1][0]), E::from_acc(p[2 * kk + 1][1])),
        ptx::pack_halves(E::from_acc(p[2 * kk + 1][2]), E::from_acc(p[2 * kk + 1][3])),
    };
    MT_UNROLL
    for (int dt = 0; dt < D / 8; dt += 2) {
      std::uint32_t b4[4];
      ptx::ldmatrix_x4_trans(b4, &tile[kk * 16 + (matrix % 2) * 8 + matrix_row][(dt + matrix / 2) * 8]);
      const std::uint32_t b_lo[2] = {b4[0], b4[1]}, b_hi[2] = {b4[2], b4[3]};
      mma<E>(o[dt], a, b_lo);
      mma<E>(o[dt + 1], a, b_hi);
    }
  }
}

// Where accumulator element e of n-tile nt sits: its row in the warp's 16
// and its column in the tile's 32.
__device__ __forceinline__ int fragment_row(int e) { return static_cast<int>(threadIdx.x) % 32 / 4 + (e / 2) * 8; }
__device__ __forceinline__ int fragment_col(int nt, int e) {
  return nt * 8 + 2 * (static_cast<int>(threadIdx.x) % 4) + e % 2;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Writes a warp's 16 x D accumulator rows (times `factor`) to rows row0.. of
// a [length, D] head slice, skipping rows at or past `length`.
template <typename E, int D>
__device__ __forceinline__ void store_rows(std::uint16_t* head, int64_t row0, int64_t length,
                                           const float (&o)[D / 8][4], const float (&factor)[2]) {
  MT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + fragment_row(2 * half);
    if (row >= length) continue;
    MT_UNROLL
    for (int dt = 0; dt < D / 8; ++dt) {
      const int c = fragment_col(dt, 2 * half);
      head[row * D + c] = E::from_acc(o[dt][2 * half] * factor[half]);
      head[row * D + c + 1] = E::from_acc(o[dt][2 * half + 1] * factor[half]);
    }
  }
}

}  // namespace mt::MT_KERNEL_NS::attention::tensor_core
