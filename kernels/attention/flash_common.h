// What the fused CUDA/sim attention kernels share (private to
// kernels/attention): the mask and dropout rules of math.h, where a
// [B, H, T, D] row lives, the dtype visit, and the per-rung launchers the
// entry points call.
#pragma once

#include <cstdint>

#include "kernels/attention/api.h"
#include "kernels/attention/math.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS::attention {

using kernels::AttentionProblem;

// The mask, causal and dropout rules, shared with the CPU kernel (math.h).
using ::mt::kernels::attention::dropout_factor;
using ::mt::kernels::attention::first_query_head;
using ::mt::kernels::attention::key_end;
using ::mt::kernels::attention::kv_head;
using ::mt::kernels::attention::kv_head_count;
using ::mt::kernels::attention::score_bias;

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

// The rungs (each in its own .cu file), called by the entry points of ../cuda.cu.
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
