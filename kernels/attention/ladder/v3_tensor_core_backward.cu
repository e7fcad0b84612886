// Attention ladder v3: fused backward on Tensor Cores (mma.sync m16n8k16).
//
// What: v2 backward's gradients (same formulas: p = exp(s - lse),
//   dp = dO V^T, ds = p (dp - delta), dV = P^T dO, dK = scale dS^T Q,
//   dQ = scale dS K) for f16/bf16 with head dim 64 or 128 (D == Dv).
// How: two kernels, each a block of 4 warps with 16 rows per warp, built
//   from the two products of tensor_core_tiles.h:
//   - by keys: a block owns 64 keys of a K/V head; their K and V rows become
//     A fragments once. For each query head reading them (a group of them
//     under grouped-query attention, in order) and each tile of 32 queries (Q, dO, lse, delta in shared
//     memory) a warp forms S^T = K Q^T and dP^T = V dO^T for its 16 keys,
//     then P^T and dS^T in registers, and accumulates dV += P^T dO and
//     dK += dS^T Q with P^T and dS^T fed straight from the accumulators.
//   - by queries: a block owns 64 queries; Q and dO rows become A fragments.
//     For each tile of 32 keys (K, V in shared memory) a warp forms
//     S = Q K^T and dP = dO V^T, then dS, and accumulates dQ += dS K.
//   Every gradient element is summed by one thread in a fixed order: no
//   atomics, deterministic, at the price of forming S and dP twice (as v2).
// Precision: S, dP, the probabilities and all three accumulators are f32;
//   P and dS are rounded to the input dtype for their products (as
//   FlashAttention does), and each gradient is rounded once.
// Left on the table: one kernel writing dQ with atomics (FlashAttention 2),
//   cp.async double buffering, wgmma on Hopper.
// Speed: not measured yet; no GPU has run it (bench/attention_bench prints it).
#include "kernels/attention/tensor_core_tiles.h"
#include "kernels/common/block_reduce.h"

namespace mt::MT_KERNEL_NS::attention {
namespace {

using namespace tensor_core;

// The dropped-out probability z p and ds = p (z dp - delta) of one
// accumulator element, from its score and dp (z: the dropout factor, 1
// without dropout); zero where the pair is masked or the query row has no
// key at all (lse = -inf).
struct ProbabilityAndGradient {
  float p, ds;
};
__device__ __forceinline__ ProbabilityAndGradient probability_and_gradient(const AttentionProblem& p, int64_t bh,
                                                                           int64_t query, int64_t key, float score,
                                                                           float dp, float row_lse, float row_delta) {
  const float bias = score_bias(p, bh, query, key);
  if (row_lse == -INFINITY || bias == -INFINITY) return {0.0f, 0.0f};
  const float prob = rowwise::acc_exp(score * p.scale + bias - row_lse);
  const float z = dropout_factor(p, bh, query, key);
  return {prob * z, prob * (dp * z - row_delta)};
}

template <typename E, int D>
__global__ void v3_grad_kv_kernel(AttentionProblem p, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v, const std::uint16_t* grad_out, const float* lse,
                                  const float* delta, std::uint16_t* grad_k, std::uint16_t* grad_v) {
  __shared__ __align__(16) Tile<D> kv_s[kBlockRows];  // K, then V, while their fragments are taken
  __shared__ __align__(16) Tile<D> q_s[kTileRows];
  __shared__ __align__(16) Tile<D> do_s[kTileRows];
  __shared__ float lse_s[kTileRows], delta_s[kTileRows];
  const int64_t kvbh = blockIdx.y;  // a K/V head: with grouped-query attention, several query heads read it
  const int64_t first_key = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t warp_key0 = first_key + warp * kWarpRows;

  std::uint32_t k_frag[D / 16][4], v_frag[D / 16][4];
  load_block_fragments<D>(k_frag, v_frag, kv_s, k + kvbh * p.k_len * D, v + kvbh * p.k_len * D, first_key, p.k_len);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  // Causal: queries before this block's first key see none of its keys.
  const int64_t first_query = p.causal ? first_key / kTileRows * kTileRows : 0;
  // The group's query heads in order, summed into the same fragments: deterministic.
  const int64_t group_first = first_query_head(p, kvbh), group_end = group_first + p.heads / kv_head_count(p);
  for (int64_t bh = group_first; bh < group_end; ++bh) {
    for (int64_t i0 = first_query; i0 < p.q_len; i0 += kTileRows) {
      __syncthreads();
      load_tile<kTileRows, D>(q_s, q + bh * p.q_len * D, i0, p.q_len);
      load_tile<kTileRows, D>(do_s, grad_out + bh * p.q_len * D, i0, p.q_len);
      if (threadIdx.x < kTileRows) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < p.q_len ? lse[bh * p.q_len + i] : -INFINITY;
        delta_s[threadIdx.x] = i < p.q_len ? delta[bh * p.q_len + i] : 0.0f;
      }
      __syncthreads();
      float s[4][4], dp[4][4];
      scores_against<E, D>(s, k_frag, q_s);    // S^T: rows are this warp's keys, columns the tile's queries
      scores_against<E, D>(dp, v_frag, do_s);  // dP^T
      MT_UNROLL
      for (int nt = 0; nt < 4; ++nt) {
        MT_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int column = fragment_col(nt, e);
          const ProbabilityAndGradient g = probability_and_gradient(
              p, bh, i0 + column, warp_key0 + fragment_row(e), s[nt][e], dp[nt][e], lse_s[column], delta_s[column]);
          s[nt][e] = g.p;
          dp[nt][e] = g.ds;
        }
      }
      accumulate_product<E, D>(dv, s, do_s);  // dV += P^T dO
      accumulate_product<E, D>(dk, dp, q_s);  // dK += dS^T Q
    }
  }
  const float ones[2] = {1.0f, 1.0f}, scale[2] = {p.scale, p.scale};
  store_rows<E, D>(grad_v + kvbh * p.k_len * D, warp_key0, p.k_len, dv, ones);
  store_rows<E, D>(grad_k + kvbh * p.k_len * D, warp_key0, p.k_len, dk, scale);
}

template <typename E, int D>
__global__ void v3_grad_q_kernel(AttentionProblem p, const std::uint16_t* q, const std::uint16_t* k,
                                 const std::uint16_t* v, const std::uint16_t* grad_out, const float* lse,
                                 const float* delta, std::uint16_t* grad_q) {
  __shared__ __align__(16) Tile<D> rows_s[kBlockRows];  // Q, then dO, while their fragments are taken
  __shared__ __align__(16) Tile<D> k_s[kTileRows];
  __shared__ __align__(16) Tile<D> v_s[kTileRows];
  const int64_t bh = blockIdx.y, kvbh = kv_head(p, bh);
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t warp_row0 = first_row + warp * kWarpRows;

  std::uint32_t q_frag[D / 16][4], do_frag[D / 16][4];
  load_block_fragments<D>(q_frag, do_frag, rows_s, q + bh * p.q_len * D, grad_out + bh * p.q_len * D, first_row,
                          p.q_len);
  float row_lse[2], row_delta[2];
  MT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t i = warp_row0 + fragment_row(2 * half);
    row_lse[half] = i < p.q_len ? lse[bh * p.q_len + i] : -INFINITY;
    row_delta[half] = i < p.q_len ? delta[bh * p.q_len + i] : 0.0f;
  }

  float dq[D / 8][4] = {};
  const int64_t keys = key_end(p, first_row, kBlockRows);
  for (int64_t j0 = 0; j0 < keys; j0 += kTileRows) {
    __syncthreads();
    load_tile<kTileRows, D>(k_s, k + kvbh * p.k_len * D, j0, p.k_len);
    load_tile<kTileRows, D>(v_s, v + kvbh * p.k_len * D, j0, p.k_len);
    __syncthreads();
    float s[4][4], dp[4][4];
    scores_against<E, D>(s, q_frag, k_s);    // S
    scores_against<E, D>(dp, do_frag, v_s);  // dP
    MT_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      MT_UNROLL
      for (int e = 0; e < 4; ++e) {
        dp[nt][e] = probability_and_gradient(p, bh, warp_row0 + fragment_row(e), j0 + fragment_col(nt, e), s[nt][e],
                                             dp[nt][e], row_lse[e / 2], row_delta[e / 2])
                        .ds;
      }
    }
    accumulate_product<E, D>(dq, dp, k_s);  // dQ += dS K
  }
  const float scale[2] = {p.scale, p.scale};
  store_rows<E, D>(grad_q + bh * p.q_len * D, warp_row0, p.q_len, dq, scale);
}

template <typename E, int D>
void launch_v3_backward(const AttentionProblem& p, const void* q, const void* k, const void* v, const void* grad_out,
                        const float* lse, const float* delta, void* grad_q, void* grad_k, void* grad_v, Stream stream) {
  using S = std::uint16_t;
  const auto* cq = static_cast<const S*>(q);
  const auto* ck = static_cast<const S*>(k);
  const auto* cv = static_cast<const S*>(v);
  const auto* cdo = static_cast<const S*>(grad_out);
  const auto heads = static_cast<unsigned>(p.batch * p.heads);
  declare_attention_work(p, sizeof(S), 4, 2, 4);  // S, dP, dV, dK; q, dO and k, v, dK, dV
  const auto kv_heads = static_cast<unsigned>(p.batch * kv_head_count(p));
  launch("attention_v3_grad_kv", v3_grad_kv_kernel<E, D>,
         dim3(static_cast<unsigned>((p.k_len + kBlockRows - 1) / kBlockRows), kv_heads), dim3(kThreads), 0, stream, p,
         cq, ck, cv, cdo, lse, delta, static_cast<S*>(grad_k), static_cast<S*>(grad_v));
  declare_attention_work(p, sizeof(S), 3, 3, 2);  // S, dP, dQ; q, dO, dQ and k, v
  launch("attention_v3_grad_q", v3_grad_q_kernel<E, D>,
         dim3(static_cast<unsigned>((p.q_len + kBlockRows - 1) / kBlockRows), heads), dim3(kThreads), 0, stream, p, cq,
         ck, cv, cdo, lse, delta, static_cast<S*>(grad_q));
}

}  // namespace

void v3_backward(kernels::KernelDType dtype, const AttentionProblem& p, const void* q, const void* k, const void* v,
                 const void* grad_out, const float* lse, const float* delta, void* grad_q, void* grad_k, void* grad_v,
                 Stream stream) {
  visit_fused_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (E::kIs16Bit) {
      if (p.head_dim == 64) {
        launch_v3_backward<E, 64>(p, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
      } else {
        launch_v3_backward<E, 128>(p, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
      }
    }
  });
}

}  // namespace mt::MT_KERNEL_NS::attention
