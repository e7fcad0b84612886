// The rules every fused attention kernel shares, written once: which
// (query, key) pairs the masks keep and what they add to a score, where a
// causal query block's keys end, and what dropout multiplies each
// probability by. The CUDA/sim rungs (ladder/, through flash_common.h) and
// the CPU kernel (cpu.cpp) call these very functions, so a mask or dropout
// rule cannot differ between devices.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/attention/api.h"
#include "runtime/macros.h"

namespace mt::kernels::attention {

// What the masks add to the scaled score of query `i` and key `j` of head
// `bh` (= b * heads + h): -inf outside the query or key range, in the causal
// future, on padding or where a bool attn_mask is false; else a float
// attn_mask's value, or 0.
MT_HOST_DEVICE inline float score_bias(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j) {
  constexpr float kMasked = -INFINITY;
  // Rows and keys past the ends (the padding of a tile) read no mask memory.
  if (i >= p.q_len || j >= p.k_len || (p.causal && j > i)) return kMasked;
  const int64_t b = bh / p.heads;
  if (p.key_padding != nullptr && p.key_padding[b * p.k_len + j]) return kMasked;
  if (p.keep_mask == nullptr && p.bias_mask == nullptr) return 0.0f;
  const int64_t* s = p.mask_strides;
  const int64_t at = b * s[0] + (bh - b * p.heads) * s[1] + i * s[2] + j * s[3];
  if (p.keep_mask != nullptr) return p.keep_mask[at] ? 0.0f : kMasked;
  return p.bias_mask[at];
}

// The K/V heads of the problem (heads unless grouped-query attention), and
// which of them query head bh (= b * heads + h) reads: b * KV + h / (heads / KV).
MT_HOST_DEVICE inline int64_t kv_head_count(const AttentionProblem& p) {
  return p.kv_heads > 0 ? p.kv_heads : p.heads;
}
MT_HOST_DEVICE inline int64_t kv_head(const AttentionProblem& p, int64_t bh) {
  const int64_t kv = kv_head_count(p), b = bh / p.heads;
  return b * kv + (bh - b * p.heads) / (p.heads / kv);
}
// The first query head of K/V head kvbh's group (the group is heads / KV consecutive heads).
MT_HOST_DEVICE inline int64_t first_query_head(const AttentionProblem& p, int64_t kvbh) {
  const int64_t kv = kv_head_count(p), b = kvbh / kv;
  return b * p.heads + (kvbh - b * kv) * (p.heads / kv);
}

// The last key any query of [first_query, first_query + rows) may see: with
// a causal mask the key loop of a query tile stops there.
MT_HOST_DEVICE inline int64_t key_end(const AttentionProblem& p, int64_t first_query, int64_t rows) {
  if (!p.causal) return p.k_len;
  const int64_t end = first_query + rows;
  return end < p.k_len ? end : p.k_len;
}

// The Philox uniform number dropout draws for the probability of (query i,
// key j) of head bh: the dropout op's index for the same [B, H, Tq, Tk]
// weights (kernels/dropout/dropout.h).
MT_HOST_DEVICE inline uint64_t dropout_element(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j) {
  return static_cast<uint64_t>((bh * p.q_len + i) * p.k_len + j);
}

// What dropout multiplies a probability by, given its uniform number: 0 when
// dropped, dropout_scale when kept.
MT_HOST_DEVICE inline float dropout_keep_factor(const AttentionProblem& p, float uniform) {
  return uniform >= p.dropout_p ? p.dropout_scale : 0.0f;
}

// What dropout multiplies the probability of (query i, key j) of head bh by;
// 1 without dropout.
MT_HOST_DEVICE inline float dropout_factor(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j) {
  if (p.dropout_p <= 0.0f) return 1.0f;
  return dropout_keep_factor(p, philox_uniform(p.dropout_seed, p.dropout_offset, dropout_element(p, bh, i, j)));
}

}  // namespace mt::kernels::attention
