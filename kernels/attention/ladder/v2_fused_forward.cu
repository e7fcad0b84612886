// Attention ladder v2: fused forward with scalar math.
//
// What: out = softmax(q k^T * scale + mask) v for one [B, H] head per grid
//   row, plus lse = log-sum-exp of each score row, saved for backward.
// How: v1 (the reference path) writes the T x T scores and probabilities to
//   memory and reads them back three times. v2 never forms them: one thread
//   owns one query row (its q in registers, pre-multiplied by the scale, and
//   its output accumulator), the block walks the keys in tiles of kKeys that
//   all threads load together into shared memory, and each thread runs the
//   "online softmax" over them: per tile it finds the tile's largest score,
//   raises its running max m if needed, rescales its running sum l and its
//   accumulator by exp(m_old - m_new), then adds exp(s - m) and exp(s - m) v
//   for each key. At the end out = acc / l and lse = m + log l. A causal
//   query tile stops at its last query's key. Dropout multiplies exp(s - m)
//   by 0 or 1 / (1 - p) in the accumulator only (l is the softmax's own sum).
// Precision: q, k, v widen to f32 as they are loaded; scores, max, sum and
//   accumulator are f32; out is rounded once. A row whose every key is
//   masked has l = 0: out is NaN there (as PyTorch's math path) and lse -inf.
// Bound: scalar FMAs, one per (query, key, dim) twice; Tensor Cores idle.
//   Kept for teaching and for head dims / dtypes v3 does not take.
// Speed: not measured yet; no GPU has run it (bench/attention_bench prints it).
#include "kernels/attention/flash_common.h"
#include "kernels/common/block_reduce.h"

namespace mt::MT_KERNEL_NS::attention {
namespace {

constexpr int kRows = 64;  // query rows (threads) per block
constexpr int kKeys = 32;  // keys per shared-memory tile

template <typename E, int kMaxDim>
__global__ void v2_forward_kernel(AttentionProblem p, const typename E::Storage* q, const typename E::Storage* k,
                                  const typename E::Storage* v, typename E::Storage* out, float* lse) {
  __shared__ float k_tile[kKeys][kMaxDim];
  __shared__ float v_tile[kKeys][kMaxDim];
  const int64_t bh = blockIdx.y, kvbh = kv_head(p, bh);  // grouped-query: the K/V head this query head reads
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = first_row + threadIdx.x;
  const bool active = i < p.q_len;
  const int d = static_cast<int>(p.head_dim), dv = static_cast<int>(p.value_dim);

  float q_row[kMaxDim], acc[kMaxDim];
  for (int c = 0; c < kMaxDim; ++c) {
    q_row[c] = active && c < d ? E::to_acc(q[row_offset(bh, p.q_len, i, d) + c]) * p.scale : 0.0f;
    acc[c] = 0.0f;
  }
  float m = rowwise::negative_infinity<float>(), l = 0.0f;

  const int64_t keys = key_end(p, first_row, kRows);
  for (int64_t j0 = 0; j0 < keys; j0 += kKeys) {
    __syncthreads();  // the previous tile is no longer read
    for (int e = threadIdx.x; e < kKeys * kMaxDim; e += kRows) {
      const int r = e / kMaxDim, c = e % kMaxDim;
      const int64_t j = j0 + r;
      const bool in = j < p.k_len;
      k_tile[r][c] = in && c < d ? E::to_acc(k[row_offset(kvbh, p.k_len, j, d) + c]) : 0.0f;
      v_tile[r][c] = in && c < dv ? E::to_acc(v[row_offset(kvbh, p.k_len, j, dv) + c]) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    float s[kKeys];
    float tile_max = rowwise::negative_infinity<float>();
    for (int r = 0; r < kKeys; ++r) {
      const float bias = score_bias(p, bh, i, j0 + r);
      s[r] = bias;
      if (bias == rowwise::negative_infinity<float>()) continue;
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += q_row[c] * k_tile[r][c];
      s[r] = dot + bias;
      tile_max = fmaxf(tile_max, s[r]);
    }
    if (tile_max == rowwise::negative_infinity<float>()) continue;  // nothing kept in this tile
    const float m_new = fmaxf(m, tile_max);
    const float correction = rowwise::acc_exp(m - m_new);  // 0 on the first kept tile (m = -inf)
    l *= correction;
    for (int c = 0; c < dv; ++c) acc[c] *= correction;
    for (int r = 0; r < kKeys; ++r) {
      const float weight = rowwise::acc_exp(s[r] - m_new);  // 0 for masked keys
      l += weight;                                          // the softmax's sum: before dropout
      const float kept = weight == 0.0f ? 0.0f : weight * dropout_factor(p, bh, i, j0 + r);
      for (int c = 0; c < dv; ++c) acc[c] += kept * v_tile[r][c];
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.0f / l;  // inf for a fully masked row: 0 * inf makes its output NaN
  for (int c = 0; c < dv; ++c) out[row_offset(bh, p.q_len, i, dv) + c] = E::from_acc(acc[c] * inv_l);
  lse[bh * p.q_len + i] = l > 0.0f ? m + rowwise::acc_log(l) : rowwise::negative_infinity<float>();
}

template <typename E, int kMaxDim>
void launch_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out, float* lse,
                    Stream stream) {
  using S = typename E::Storage;
  const dim3 grid(static_cast<unsigned>((p.q_len + kRows - 1) / kRows), static_cast<unsigned>(p.batch * p.heads));
  declare_attention_work(p, sizeof(S), 2, 2, 2);  // Q K^T and P V; q and out, k and v
  launch("attention_v2_forward", v2_forward_kernel<E, kMaxDim>, grid, dim3(kRows), 0, stream, p,
         static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v), static_cast<S*>(out), lse);
}

}  // namespace

void v2_forward(kernels::KernelDType dtype, const AttentionProblem& p, const void* q, const void* k, const void* v,
                void* out, float* lse, Stream stream) {
  visit_fused_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if (p.head_dim <= 64 && p.value_dim <= 64) {
      launch_forward<E, 64>(p, q, k, v, out, lse, stream);
    } else {
      launch_forward<E, 128>(p, q, k, v, out, lse, stream);
    }
  });
}

}  // namespace mt::MT_KERNEL_NS::attention
