// Host entry points of the fused attention kernels (kernels/attention/ladder/),
// declared for op code that never sees a CUDA header (kernels/attention/attention.h).
//
// Every buffer is contiguous: q [B, H, Tq, D], k [B, KV, Tk, D],
// v [B, KV, Tk, Dv], out and grad_out [B, H, Tq, Dv], lse and delta
// [B, H, Tq] in f32, key_padding [B, Tk] bools (true = the key is padding).
// KV = H, or fewer for grouped-query attention: query head h reads K/V head
// h / (H / KV) (math.h's kv_head), and the K/V gradients sum over the group.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::kernels {

struct AttentionProblem {
  int64_t batch = 0, heads = 0, q_len = 0, k_len = 0, head_dim = 0, value_dim = 0;
  int64_t kv_heads = 0;  // the K/V heads: 0 or `heads` = one per query head; fewer (dividing heads) = grouped
  float scale = 1.0f;
  bool causal = false;                // query i sees keys j <= i (top-left, as PyTorch)
  const bool* key_padding = nullptr;  // [batch, k_len] or null
  // attn_mask broadcast to [B, H, Tq, Tk] by these element strides (0 along a
  // broadcast dim): keep_mask (bool, false = masked) or bias_mask (f32, added
  // to the scaled scores), or neither.
  const bool* keep_mask = nullptr;
  const float* bias_mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  // Dropout on the probabilities: element (b, h, i, j) of the [B, H, Tq, Tk]
  // weights is kept when Philox uniform number ((b H + h) Tq + i) Tk + j of
  // (seed, offset) is >= dropout_p, then scaled by dropout_scale: the mask the
  // dropout op draws for the same weights tensor (kernels/dropout/dropout.h).
  float dropout_p = 0.0f, dropout_scale = 1.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// The rungs of the attention ladder that are fused kernels (v1, unfused, is
// the reference path of autograd/ops_attention.cpp).
enum class AttentionKernel : int {
  V2Scalar,      // one thread per query row, K/V tiles in shared memory, scalar f32 math
  V3TensorCore,  // a warp per 16 rows, every product on mma.sync (f16/bf16, D = Dv in {64, 128})
};

// Largest head dim the fused kernels take; v3 takes exactly 64 or 128 with D == Dv.
inline constexpr int64_t kFusedAttentionMaxHeadDim = 128;

inline const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::V2Scalar ? "v2_fused_scalar" : "v3_tensor_core";
}

}  // namespace mt::kernels

// out = softmax(q k^T * scale, masked) v, and lse = the log-sum-exp of each
// masked, scaled score row (-inf for a row with no key left; its out is NaN).
MT_CUDA_KERNEL_API(void attention_forward(mt::kernels::KernelDType dtype, const mt::kernels::AttentionProblem& problem,
                                          mt::kernels::AttentionKernel kernel, const void* q, const void* k,
                                          const void* v, void* out, float* lse, mt::kernels::Stream stream))
// grad_q/grad_k/grad_v from grad_out with the rung the caller names,
// recomputing the probabilities from q, k and lse; delta is scratch for
// rowsum(grad_out * out).
MT_CUDA_KERNEL_API(void attention_backward(mt::kernels::KernelDType dtype, const mt::kernels::AttentionProblem& problem,
                                           mt::kernels::AttentionKernel kernel, const void* q, const void* k,
                                           const void* v, const void* out, const void* grad_out, const float* lse,
                                           float* delta, void* grad_q, void* grad_k, void* grad_v,
                                           mt::kernels::Stream stream))
