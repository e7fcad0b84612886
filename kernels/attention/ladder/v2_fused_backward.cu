// Attention ladder v2: fused backward with scalar math.
//
// What: grad_q, grad_k, grad_v of out = softmax(s) v, s = q k^T * scale +
//   mask, from grad_out, without the T x T matrices ever stored.
// How: the probabilities are recomputed from q, k and the forward's
//   log-sum-exp, p = exp(s - lse), tile by tile. With
//   delta_i = sum_c grad_out[i][c] * out[i][c] (= sum_j p_ij dp_ij),
//     dp_ij = grad_out_i . v_j,   ds_ij = p_ij (dp_ij - delta_i),
//     grad_v_j = sum_i p_ij grad_out_i,
//     grad_k_j = scale * sum_i ds_ij q_i,   grad_q_i = scale * sum_j ds_ij k_j.
//   With dropout (mask z: 0 or 1 / (1 - p), redrawn from the same Philox
//   numbers as forward) dp_ij is z_ij (grad_out_i . v_j) and grad_v sums
//   z_ij p_ij grad_out_i; delta is unchanged (out already holds z).
//   Three kernels: delta (one thread per row); grad_q (one thread per query
//   row, walking key tiles in shared memory); grad_k and grad_v (one thread
//   per key row of a K/V head, walking the query tiles of each query head
//   that reads it: one, or a group under grouped-query attention). Each output element is summed by one
//   thread in a fixed order: no atomics, and the result does not depend on
//   scheduling (deterministic). The price is computing p twice.
// Precision: everything in f32 (delta, p, dp, ds and the three gradient
//   accumulators); each gradient rounded once to the input dtype. Rows with
//   no key kept (lse = -inf) contribute nothing: their grad_q is 0.
// Bound: scalar FMAs, as v2 forward.
// Speed: not measured yet; no GPU has run it (bench/attention_bench prints it).
#include "kernels/attention/flash_common.h"
#include "kernels/common/block_reduce.h"

namespace mt::MT_KERNEL_NS::attention {
namespace {

constexpr int kRows = 64;  // rows (threads) per block of the grad_q and grad_k/v kernels
constexpr int kTile = 32;  // rows per shared-memory tile of the other operand

template <typename E>
__global__ void delta_kernel(const typename E::Storage* out, const typename E::Storage* grad_out, float* delta,
                             int64_t rows, int64_t width) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float dot = 0.0f;
  for (int64_t c = 0; c < width; ++c) dot += E::to_acc(out[row * width + c]) * E::to_acc(grad_out[row * width + c]);
  delta[row] = dot;
}

// Loads rows [first, first + kTile) of a [length, width] head slice into an f32 tile (zeros past the end).
template <typename E, int kMaxDim>
__device__ void load_rows(float (&tile)[kTile][kMaxDim], const typename E::Storage* head, int64_t first, int64_t length,
                          int width) {
  for (int e = threadIdx.x; e < kTile * kMaxDim; e += kRows) {
    const int r = e / kMaxDim, c = e % kMaxDim;
    tile[r][c] = first + r < length && c < width ? E::to_acc(head[(first + r) * width + c]) : 0.0f;
  }
}

template <typename E, int kMaxDim>
__global__ void grad_q_kernel(AttentionProblem p, const typename E::Storage* q, const typename E::Storage* k,
                              const typename E::Storage* v, const typename E::Storage* grad_out, const float* lse,
                              const float* delta, typename E::Storage* grad_q) {
  __shared__ float k_tile[kTile][kMaxDim];
  __shared__ float v_tile[kTile][kMaxDim];
  const int64_t bh = blockIdx.y, kvbh = kv_head(p, bh);
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = first_row + threadIdx.x;
  const int d = static_cast<int>(p.head_dim), dv = static_cast<int>(p.value_dim);
  const float row_lse = i < p.q_len ? lse[bh * p.q_len + i] : rowwise::negative_infinity<float>();
  const bool active = row_lse != rowwise::negative_infinity<float>();  // also false past the last row
  const float row_delta = active ? delta[bh * p.q_len + i] : 0.0f;

  float q_row[kMaxDim], do_row[kMaxDim], dq[kMaxDim];
  for (int c = 0; c < kMaxDim; ++c) {
    q_row[c] = active && c < d ? E::to_acc(q[row_offset(bh, p.q_len, i, d) + c]) : 0.0f;
    do_row[c] = active && c < dv ? E::to_acc(grad_out[row_offset(bh, p.q_len, i, dv) + c]) : 0.0f;
    dq[c] = 0.0f;
  }
  const int64_t keys = key_end(p, first_row, kRows);
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    load_rows<E, kMaxDim>(k_tile, k + row_offset(kvbh, p.k_len, 0, d), j0, p.k_len, d);
    load_rows<E, kMaxDim>(v_tile, v + row_offset(kvbh, p.k_len, 0, dv), j0, p.k_len, dv);
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const float bias = score_bias(p, bh, i, j0 + r);
      if (bias == rowwise::negative_infinity<float>()) continue;
      float s = 0.0f, dp = 0.0f;
      for (int c = 0; c < d; ++c) s += q_row[c] * k_tile[r][c];
      for (int c = 0; c < dv; ++c) dp += do_row[c] * v_tile[r][c];
      // With dropout, dp is taken through the mask: d(out)/d(p) = z v with z = 0 or 1 / (1 - p).
      const float ds =
          rowwise::acc_exp(s * p.scale + bias - row_lse) * (dp * dropout_factor(p, bh, i, j0 + r) - row_delta);
      for (int c = 0; c < d; ++c) dq[c] += ds * k_tile[r][c];
    }
  }
  if (i >= p.q_len) return;
  for (int c = 0; c < d; ++c) grad_q[row_offset(bh, p.q_len, i, d) + c] = E::from_acc(dq[c] * p.scale);
}

template <typename E, int kMaxDim>
__global__ void grad_kv_kernel(AttentionProblem p, const typename E::Storage* q, const typename E::Storage* k,
                               const typename E::Storage* v, const typename E::Storage* grad_out, const float* lse,
                               const float* delta, typename E::Storage* grad_k, typename E::Storage* grad_v) {
  __shared__ float q_tile[kTile][kMaxDim];
  __shared__ float do_tile[kTile][kMaxDim];
  __shared__ float lse_tile[kTile], delta_tile[kTile];
  const int64_t kvbh = blockIdx.y;  // a K/V head: with grouped-query attention, several query heads read it
  const int64_t first_key = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t j = first_key + threadIdx.x;
  const bool active = j < p.k_len;
  const int d = static_cast<int>(p.head_dim), dv = static_cast<int>(p.value_dim);

  float k_row[kMaxDim], v_row[kMaxDim], dk[kMaxDim], dvj[kMaxDim];
  for (int c = 0; c < kMaxDim; ++c) {
    k_row[c] = active && c < d ? E::to_acc(k[row_offset(kvbh, p.k_len, j, d) + c]) : 0.0f;
    v_row[c] = active && c < dv ? E::to_acc(v[row_offset(kvbh, p.k_len, j, dv) + c]) : 0.0f;
    dk[c] = 0.0f;
    dvj[c] = 0.0f;
  }
  // Causal: queries before this block's first key see none of its keys.
  const int64_t first_query = p.causal ? first_key / kTile * kTile : 0;
  // The group's query heads in order, each summed in the same thread: deterministic.
  const int64_t group_first = first_query_head(p, kvbh), group_end = group_first + p.heads / kv_head_count(p);
  for (int64_t bh = group_first; bh < group_end; ++bh) {
    for (int64_t i0 = first_query; i0 < p.q_len; i0 += kTile) {
      __syncthreads();
      load_rows<E, kMaxDim>(q_tile, q + row_offset(bh, p.q_len, 0, d), i0, p.q_len, d);
      load_rows<E, kMaxDim>(do_tile, grad_out + row_offset(bh, p.q_len, 0, dv), i0, p.q_len, dv);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        lse_tile[threadIdx.x] = i < p.q_len ? lse[bh * p.q_len + i] : rowwise::negative_infinity<float>();
        delta_tile[threadIdx.x] = i < p.q_len ? delta[bh * p.q_len + i] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < kTile; ++r) {
        const float row_lse = lse_tile[r];
        const float bias = score_bias(p, bh, i0 + r, j);
        if (row_lse == rowwise::negative_infinity<float>() || bias == rowwise::negative_infinity<float>()) continue;
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < d; ++c) s += q_tile[r][c] * k_row[c];
        for (int c = 0; c < dv; ++c) dp += do_tile[r][c] * v_row[c];
        const float prob = rowwise::acc_exp(s * p.scale + bias - row_lse);
        const float z = dropout_factor(p, bh, i0 + r, j);  // 1 without dropout
        const float ds = prob * (dp * z - delta_tile[r]);
        for (int c = 0; c < dv; ++c) dvj[c] += prob * z * do_tile[r][c];
        for (int c = 0; c < d; ++c) dk[c] += ds * q_tile[r][c];
      }
    }
  }
  if (!active) return;
  for (int c = 0; c < d; ++c) grad_k[row_offset(kvbh, p.k_len, j, d) + c] = E::from_acc(dk[c] * p.scale);
  for (int c = 0; c < dv; ++c) grad_v[row_offset(kvbh, p.k_len, j, dv) + c] = E::from_acc(dvj[c]);
}

template <typename E>
void launch_delta(const AttentionProblem& p, const void* out, const void* grad_out, float* delta, Stream stream) {
  using S = typename E::Storage;
  const int64_t rows = p.batch * p.heads * p.q_len;
  constexpr int kDeltaThreads = 256;
  launch("attention_delta", delta_kernel<E>, dim3(static_cast<unsigned>((rows + kDeltaThreads - 1) / kDeltaThreads)),
         dim3(kDeltaThreads), 0, stream, static_cast<const S*>(out), static_cast<const S*>(grad_out), delta, rows,
         p.value_dim);
}

template <typename E, int kMaxDim>
void launch_backward(const AttentionProblem& p, const void* q, const void* k, const void* v, const void* grad_out,
                     const float* lse, const float* delta, void* grad_q, void* grad_k, void* grad_v, Stream stream) {
  using S = typename E::Storage;
  const auto* cq = static_cast<const S*>(q);
  const auto* ck = static_cast<const S*>(k);
  const auto* cv = static_cast<const S*>(v);
  const auto* cdo = static_cast<const S*>(grad_out);
  const auto heads = static_cast<unsigned>(p.batch * p.heads);
  declare_attention_work(p, sizeof(S), 3, 3, 2);  // S, dP, dQ; q, dO, dQ and k, v
  launch("attention_v2_grad_q", grad_q_kernel<E, kMaxDim>,
         dim3(static_cast<unsigned>((p.q_len + kRows - 1) / kRows), heads), dim3(kRows), 0, stream, p, cq, ck, cv, cdo,
         lse, delta, static_cast<S*>(grad_q));
  declare_attention_work(p, sizeof(S), 4, 2, 4);  // S, dP, dV, dK; q, dO and k, v, dK, dV
  const auto kv_heads = static_cast<unsigned>(p.batch * kv_head_count(p));
  launch("attention_v2_grad_kv", grad_kv_kernel<E, kMaxDim>,
         dim3(static_cast<unsigned>((p.k_len + kRows - 1) / kRows), kv_heads), dim3(kRows), 0, stream, p, cq, ck, cv,
         cdo, lse, static_cast<const float*>(delta), static_cast<S*>(grad_k), static_cast<S*>(grad_v));
}

}  // namespace

void backward_delta(kernels::KernelDType dtype, const AttentionProblem& p, const void* out, const void* grad_out,
                    float* delta, Stream stream) {
  visit_fused_dtype(dtype, [&](auto tag) { launch_delta<decltype(tag)>(p, out, grad_out, delta, stream); });
}

void v2_backward(kernels::KernelDType dtype, const AttentionProblem& p, const void* q, const void* k, const void* v,
                 const void* grad_out, const float* lse, const float* delta, void* grad_q, void* grad_k, void* grad_v,
                 Stream stream) {
  visit_fused_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if (p.head_dim <= 64 && p.value_dim <= 64) {
      launch_backward<E, 64>(p, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
    } else {
      launch_backward<E, 128>(p, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
    }
  });
}

}  // namespace mt::MT_KERNEL_NS::attention
