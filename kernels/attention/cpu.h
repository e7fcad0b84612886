// The fused attention's CPU back end (cpu.cpp), as the dispatcher
// (kernels/attention/attention.h) calls it: the problem of api.h (sizes,
// scale, masks, dropout) over tensors.
#pragma once

#include "core/tensor.h"
#include "kernels/attention/api.h"

namespace mt::kernels::cpu {

// out [B, H, Tq, Dv] (contiguous) and lse [B, H, Tq] (contiguous f32) from
// [B, H, T, width] views q, k, v of one dtype (f32, f16 or bf16) whose last
// dim is contiguous: the head split's transposed views are read in place.
void attention_forward(const AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse);

// grad_q, grad_k, grad_v (contiguous, of their inputs' shapes and dtype)
// from grad_out (last dim contiguous), recomputing the probabilities from
// q, k and lse; out is forward's (contiguous).
void attention_backward(const AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& grad_out, const Tensor& lse, const Tensor& grad_q,
                        const Tensor& grad_k, const Tensor& grad_v);

}  // namespace mt::kernels::cpu
