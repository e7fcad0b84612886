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
#include "kernels/attention/tensor_core_tiles.h"
#include "kernels/common/block_reduce.h"

namespace mt::MT_KERNEL_NS::attention {
namespace {

using namespace tensor_core;

template <typename E, int D>
__global__ void v3_forward_kernel(AttentionProblem p, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v, std::uint16_t* out, float* lse) {
  constexpr float kMinusInf = -INFINITY;
  __shared__ __align__(16) Tile<D> q_s[kBlockRows];
  __shared__ __align__(16) Tile<D> k_s[kTileRows];
  __shared__ __align__(16) Tile<D> v_s[kTileRows];
  const int64_t bh = blockIdx.y, kvbh = kv_head(p, bh);  // grouped-query: the K/V head this query head reads
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t warp_row0 = first_row + warp * kWarpRows;

  load_tile<kBlockRows, D>(q_s, q + bh * p.q_len * D, first_row, p.q_len);
  __syncthreads();
  std::uint32_t q_frag[D / 16][4];
  load_a_fragments<D>(q_frag, q_s, warp * kWarpRows);

  float o[D / 8][4] = {};
  float m[2] = {kMinusInf, kMinusInf};
  float l[2] = {0.0f, 0.0f};  // this thread's share of each row's sum (quad-reduced at the end)

  const int64_t keys = key_end(p, first_row, kBlockRows);
  for (int64_t j0 = 0; j0 < keys; j0 += kTileRows) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_tile<kTileRows, D>(k_s, k + kvbh * p.k_len * D, j0, p.k_len);
    load_tile<kTileRows, D>(v_s, v + kvbh * p.k_len * D, j0, p.k_len);
    __syncthreads();

    // 1. S = Q K^T for this warp's 16 rows x 32 keys, scaled and masked; each row's max.
    float s[4][4];
    scores_against<E, D>(s, q_frag, k_s);
    float tile_max[2] = {kMinusInf, kMinusInf};
    MT_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      MT_UNROLL
      for (int e = 0; e < 4; ++e) {
        const float bias = score_bias(p, bh, warp_row0 + fragment_row(e), j0 + fragment_col(nt, e));
        s[nt][e] = bias == kMinusInf ? kMinusInf : s[nt][e] * p.scale + bias;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    }
    // 2. Online softmax: new max, rescale the running sum and accumulator.
    float m_new[2];
    MT_UNROLL
    for (int half = 0; half < 2; ++half) {
      m_new[half] = fmaxf(m[half], quad_max(tile_max[half]));
      // A row with nothing kept yet keeps m = -inf; its (zero) state needs no rescale.
      const float correction = m_new[half] == kMinusInf ? 1.0f : rowwise::acc_exp(m[half] - m_new[half]);
      l[half] *= correction;
      MT_UNROLL
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * half] *= correction;
        o[dt][2 * half + 1] *= correction;
      }
      m[half] = m_new[half];
    }
    MT_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      MT_UNROLL
      for (int e = 0; e < 4; ++e) {
        const float row_max = m_new[e / 2];
        s[nt][e] = row_max == kMinusInf ? 0.0f : rowwise::acc_exp(s[nt][e] - row_max);
        l[e / 2] += s[nt][e];  // the softmax's sum: before dropout
        if (p.dropout_p > 0.0f && s[nt][e] != 0.0f) {
          s[nt][e] *= dropout_factor(p, bh, warp_row0 + fragment_row(e), j0 + fragment_col(nt, e));
        }
      }
    }
    // 3. O += P V, P straight from the accumulators.
    accumulate_product<E, D>(o, s, v_s);
  }

  // out = O / l (NaN for a row with no key kept: l = 0), lse = m + log l.
  float inverse[2], row_sum[2];
  MT_UNROLL
  for (int half = 0; half < 2; ++half) {
    row_sum[half] = quad_sum(l[half]);
    inverse[half] = 1.0f / row_sum[half];
  }
  store_rows<E, D>(out + bh * p.q_len * D, warp_row0, p.q_len, o, inverse);
  if (threadIdx.x % 4 != 0) return;
  MT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t i = warp_row0 + fragment_row(2 * half);
    if (i < p.q_len)
      lse[bh * p.q_len + i] = row_sum[half] > 0.0f ? m[half] + rowwise::acc_log(row_sum[half]) : kMinusInf;
  }
}

template <typename E, int D>
void launch_v3(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out, float* lse,
               Stream stream) {
  using S = std::uint16_t;
  const dim3 grid(static_cast<unsigned>((p.q_len + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(p.batch * p.heads));
  declare_attention_work(p, sizeof(S), 2, 2, 2);  // Q K^T and P V; q and out, k and v
  launch("attention_v3_forward", v3_forward_kernel<E, D>, grid, dim3(kThreads), 0, stream, p, static_cast<const S*>(q),
         static_cast<const S*>(k), static_cast<const S*>(v), static_cast<S*>(out), lse);
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
