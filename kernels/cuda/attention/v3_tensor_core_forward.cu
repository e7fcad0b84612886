// Attention ladder v3: fused forward on Tensor Cores (mma.sync m16n8k16).
//
// What: v2's result (out and the per-row log-sum-exp) for f16/bf16 with
//   head dim 64 or 128 (D == Dv).
// How: a block of 4 warps takes 64 query rows, 16 per warp. Q's tile is read
//   into shared memory once and turned into A fragments (ldmatrix_x4) that
//   stay in registers. For each tile of 32 keys the block loads K and V into
//   shared memory, and each warp:
//   1. S = Q K^T: D/16 steps of mma over 4 n-tiles of 8 keys; K is stored
//      [key][d], which is already B's "col" layout, so plain ldmatrix_x4
//      yields two n-tiles' fragments at once;
//   2. scales and masks S in registers; each thread holds 2 rows (group and
//      group + 8) x 8 keys of it, so a row's max is a shuffle across the 4
//      threads of a quad;
//   3. the online softmax update of v2, on those registers;
//   4. O += P V: the f32 accumulator layout of two adjacent 16x8 tiles of P
//      is exactly the A fragment of a 16x16 tile, so P goes from C registers
//      to A registers without touching shared memory (rounded to f16/bf16);
//      V is [key][d], so ldmatrix_x4.trans gives B fragments.
//   Every shared row is padded by 8 elements so ldmatrix's 8 row addresses
//   fall in different banks (as the GEMM's tensor_core_tiles.h).
// Precision: S, the running max and sum and O accumulate in f32; P is rounded
//   to the input dtype for the P V product (as FlashAttention does), while
//   the sum l adds the unrounded f32 values. out is rounded once.
// Left on the table: cp.async double buffering of K/V, exp2 with the scale
//   folded into log2(e), a causal block skipping its fully masked warps,
//   larger key tiles; wgmma on Hopper.
// Speed: not measured yet; no GPU has run it (bench/attention_bench prints it).
#include <type_traits>

#include "kernels/cuda/attention/flash_common.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/ptx.h"

namespace mt::MT_KERNEL_NS::attention {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per block
constexpr int kKeys = 32;           // keys per tile: 4 n-tiles of S, 2 k-steps of P V
constexpr int kPad = 8;

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
// left in shared memory would survive p = 0 in P V).
template <int Rows, int D>
__device__ __forceinline__ void load_tile(std::uint16_t (*tile)[D + kPad], const std::uint16_t* head, int64_t first,
                                          int64_t length) {
  constexpr int kChunksPerRow = D / 8;
  for (int chunk = threadIdx.x; chunk < Rows * kChunksPerRow; chunk += 32 * kWarps) {
    const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + r < length) value = *reinterpret_cast<const uint4*>(head + (first + r) * D + c);
    std::uint16_t* destination = &tile[r][c];
    *reinterpret_cast<uint4*>(destination) = value;
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <typename E, int D>
__global__ void v3_forward_kernel(AttentionProblem p, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v, std::uint16_t* out, float* lse) {
  constexpr int kSteps = D / 16;    // k-steps of S = Q K^T
  constexpr int kDimTiles = D / 8;  // n-tiles of O
  __shared__ __align__(16) std::uint16_t q_s[kRows][D + kPad];
  __shared__ __align__(16) std::uint16_t k_s[kKeys][D + kPad];
  __shared__ __align__(16) std::uint16_t v_s[kKeys][D + kPad];
  const int64_t bh = blockIdx.y, b = bh / p.heads;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4, quad_lane = lane % 4;
  const int matrix = lane / 8, matrix_row = lane % 8;  // which 8x8 matrix of an ldmatrix_x4 this lane addresses
  const std::uint16_t* k_head = k + bh * p.k_len * D;
  const std::uint16_t* v_head = v + bh * p.k_len * D;

  load_tile<kRows, D>(q_s, q + bh * p.q_len * D, first_row, p.q_len);
  __syncthreads();
  std::uint32_t q_frag[kSteps][4];
  MT_UNROLL
  for (int kk = 0; kk < kSteps; ++kk) {
    ptx::ldmatrix_x4(q_frag[kk], &q_s[warp * 16 + lane % 16][kk * 16 + 8 * (lane / 16)]);
  }

  float o[kDimTiles][4] = {};
  float m[2] = {rowwise::negative_infinity<float>(), rowwise::negative_infinity<float>()};
  float l[2] = {0.0f, 0.0f};  // this thread's share of each row's sum (quad-reduced at the end)
  const int64_t rows[2] = {first_row + warp * 16 + group, first_row + warp * 16 + group + 8};

  const int64_t keys = key_end(p, first_row, kRows);
  for (int64_t j0 = 0; j0 < keys; j0 += kKeys) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_tile<kKeys, D>(k_s, k_head, j0, p.k_len);
    load_tile<kKeys, D>(v_s, v_head, j0, p.k_len);
    __syncthreads();

    // 1. S = Q K^T for this warp's 16 rows x 32 keys.
    float s[4][4] = {};
    MT_UNROLL
    for (int kk = 0; kk < kSteps; ++kk) {
      MT_UNROLL
      for (int pair = 0; pair < 2; ++pair) {
        std::uint32_t b4[4];
        ptx::ldmatrix_x4(b4, &k_s[pair * 16 + (matrix / 2) * 8 + matrix_row][kk * 16 + (matrix % 2) * 8]);
        const std::uint32_t b_lo[2] = {b4[0], b4[1]}, b_hi[2] = {b4[2], b4[3]};
        mma<E>(s[2 * pair], q_frag[kk], b_lo);
        mma<E>(s[2 * pair + 1], q_frag[kk], b_hi);
      }
    }
    // 2. Scale and mask; each row's max over the tile.
    float tile_max[2] = {rowwise::negative_infinity<float>(), rowwise::negative_infinity<float>()};
    MT_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      MT_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const int64_t j = j0 + nt * 8 + 2 * quad_lane + (e % 2);
        s[nt][e] = key_kept(p, b, rows[half], j) ? s[nt][e] * p.scale : rowwise::negative_infinity<float>();
        tile_max[half] = fmaxf(tile_max[half], s[nt][e]);
      }
    }
    // 3. Online softmax: new max, rescale the running sum and accumulator.
    float m_new[2];
    MT_UNROLL
    for (int half = 0; half < 2; ++half) {
      m_new[half] = fmaxf(m[half], quad_max(tile_max[half]));
      // A row with nothing kept yet keeps m = -inf; its (zero) state needs no rescale.
      const float correction =
          m_new[half] == rowwise::negative_infinity<float>() ? 1.0f : rowwise::acc_exp(m[half] - m_new[half]);
      l[half] *= correction;
      MT_UNROLL
      for (int dt = 0; dt < kDimTiles; ++dt) {
        o[dt][2 * half] *= correction;
        o[dt][2 * half + 1] *= correction;
      }
      m[half] = m_new[half];
    }
    MT_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      MT_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const float weight =
            m_new[half] == rowwise::negative_infinity<float>() ? 0.0f : rowwise::acc_exp(s[nt][e] - m_new[half]);
        s[nt][e] = weight;
        l[half] += weight;
      }
    }
    // 4. O += P V, P straight from the accumulators (two 16x8 tiles = one 16x16 A fragment).
    MT_UNROLL
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const std::uint32_t a[4] = {
          ptx::pack_halves(E::from_acc(s[2 * kk][0]), E::from_acc(s[2 * kk][1])),
          ptx::pack_halves(E::from_acc(s[2 * kk][2]), E::from_acc(s[2 * kk][3])),
          ptx::pack_halves(E::from_acc(s[2 * kk + 1][0]), E::from_acc(s[2 * kk + 1][1])),
          ptx::pack_halves(E::from_acc(s[2 * kk + 1][2]), E::from_acc(s[2 * kk + 1][3])),
      };
      MT_UNROLL
      for (int dt = 0; dt < kDimTiles; dt += 2) {
        std::uint32_t b4[4];
        ptx::ldmatrix_x4_trans(b4, &v_s[kk * 16 + (matrix % 2) * 8 + matrix_row][(dt + matrix / 2) * 8]);
        const std::uint32_t b_lo[2] = {b4[0], b4[1]}, b_hi[2] = {b4[2], b4[3]};
        mma<E>(o[dt], a, b_lo);
        mma<E>(o[dt + 1], a, b_hi);
      }
    }
  }

  // out = O / l (NaN for a row with no key kept: l = 0), lse = m + log l.
  MT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const float row_sum = quad_sum(l[half]);
    const int64_t i = rows[half];
    if (i >= p.q_len) continue;
    const float inv = 1.0f / row_sum;
    std::uint16_t* out_row = out + (bh * p.q_len + i) * D;
    MT_UNROLL
    for (int dt = 0; dt < kDimTiles; ++dt) {
      const int c = dt * 8 + 2 * quad_lane;
      out_row[c] = E::from_acc(o[dt][2 * half] * inv);
      out_row[c + 1] = E::from_acc(o[dt][2 * half + 1] * inv);
    }
    if (quad_lane == 0) {
      lse[bh * p.q_len + i] =
          row_sum > 0.0f ? m[half] + rowwise::acc_log(row_sum) : rowwise::negative_infinity<float>();
    }
  }
}

template <typename E, int D>
void launch_v3(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out, float* lse,
               Stream stream) {
  using S = std::uint16_t;
  const dim3 grid(static_cast<unsigned>((p.q_len + kRows - 1) / kRows), static_cast<unsigned>(p.batch * p.heads));
  launch("attention_v3_forward", v3_forward_kernel<E, D>, grid, dim3(32 * kWarps), 0, stream, p,
         static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v), static_cast<S*>(out), lse);
}

}  // namespace

void v3_forward(kernels::KernelDType dtype, const AttentionProblem& p, const void* q, const void* k, const void* v,
                void* out, float* lse, Stream stream) {
  visit_fused_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (E::kIs16Bit) {
      if (p.head_dim == 64) {
        launch_v3<E, 64>(p, q, k, v, out, lse, stream);
      } else {
        launch_v3<E, 128>(p, q, k, v, out, lse, stream);
      }
    }
  });
}

}  // namespace mt::MT_KERNEL_NS::attention
