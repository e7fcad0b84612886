// What the fused attention kernels share (private to kernels/attention):
// which (query, key) pairs a mask keeps, where a [B, H, T, D] row lives, the
// dtype visit, and the per-rung launchers the entry points call.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "kernels/attention/api.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS::attention {

using kernels::AttentionProblem;

// What the masks add to the scaled score of query `i` and key `j` of head
// `bh` (= b * heads + h): -inf outside the query or key range, in the causal future,
// on padding or where a bool attn_mask is false; else a float attn_mask's
// value, or 0.
__device__ __forceinline__ float score_bias(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j) {
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

// The last key any query of [first_query, first_query + rows) may see: with
// a causal mask the key loop of a query tile stops there.
__device__ __forceinline__ int64_t key_end(const AttentionProblem& p, int64_t first_query, int64_t rows) {
  if (!p.causal) return p.k_len;
  const int64_t end = first_query + rows;
  return end < p.k_len ? end : p.k_len;
}

// What dropout multiplies the probability of (query i, key j) of head bh by:
// 0 when dropped, dropout_scale when kept, 1 without dropout.
__device__ __forceinline__ float dropout_factor(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j) {
  if (p.dropout_p <= 0.0f) return 1.0f;
  const auto element = static_cast<uint64_t>((bh * p.q_len + i) * p.k_len + j);
  return philox_uniform(p.dropout_seed, p.dropout_offset, element) >= p.dropout_p ? p.dropout_scale : 0.0f;
}

// Element offset of row `t` of head `bh` (= b * heads + h) in a [B, H, T, width] buffer.
__device__ __forceinline__ int64_t row_offset(int64_t bh, int64_t length, int64_t t, int64_t width) {
  return (bh * length + t) * width;
}

// body(Tag{}) for the dtypes the fused kernels take: f32, f16, bf16 (f64
// stays on the reference path, which gradcheck runs through).
template <typename Body>
void visit_fused_dtype(kernels::KernelDType dtype, Body&& body) {
  switch (dtype) {
    case kernels::KernelDType::F32: body(element::F32{}); return;
    case kernels::KernelDType::F16: body(element::F16{}); return;
    case kernels::KernelDType::BF16: body(element::BF16{}); return;
    case kernels::KernelDType::F64: return;
  }
}

// Declares the next launch's work for the profile: `products` T x T x D
// matrix products over every (batch, head) — 2 FLOPs per multiply-add, about
// half of them under a causal mask — and the bytes of the [B, H, T, D]
// operands it reads or writes (`q_like` of the query's length, `k_like` of
// the keys'), each once.
inline void declare_attention_work(const AttentionProblem& p, std::size_t element_bytes, int products, int q_like,
                                   int k_like) {
  const double pairs = static_cast<double>(p.batch * p.heads) * static_cast<double>(p.q_len * p.k_len);
  const double flops = 2.0 * products * pairs * static_cast<double>(p.head_dim) * (p.causal ? 0.5 : 1.0);
  const double rows = static_cast<double>(p.batch * p.heads) * static_cast<double>(p.head_dim) * element_bytes;
  kernels::declare_launch_work(rows * (q_like * p.q_len + k_like * p.k_len), flops);
}

// The rungs (each in its own .cu file), called by the entry points of attention.cu.
void v2_forward(kernels::KernelDType dtype, const AttentionProblem& problem, const void* q, const void* k,
                const void* v, void* out, float* lse, Stream stream);
void v2_backward(kernels::KernelDType dtype, const AttentionProblem& problem, const void* q, const void* k,
                 const void* v, const void* grad_out, const float* lse, const float* delta, void* grad_q, void* grad_k,
                 void* grad_v, Stream stream);
// delta = rowsum(grad_out * out) per query row, f32 (v2_fused_backward.cu), for either backward.
void backward_delta(kernels::KernelDType dtype, const AttentionProblem& problem, const void* out, const void* grad_out,
                    float* delta, Stream stream);
void v3_backward(kernels::KernelDType dtype, const AttentionProblem& problem, const void* q, const void* k,
                 const void* v, const void* grad_out, const float* lse, const float* delta, void* grad_q, void* grad_k,
                 void* grad_v, Stream stream);
void v3_forward(kernels::KernelDType dtype, const AttentionProblem& problem, const void* q, const void* k,
                const void* v, void* out, float* lse, Stream stream);

}  // namespace mt::MT_KERNEL_NS::attention
