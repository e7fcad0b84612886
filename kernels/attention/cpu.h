// The fused attention's CPU back end (cpu.cpp), as the dispatcher
// (kernels/attention/attention.h) calls it: the same problem and contiguous
// buffers as the CUDA/sim entry points of api.h, without a stream.
#pragma once

#include "core/dtype.h"
#include "kernels/attention/api.h"

namespace mt::kernels::cpu {

// out [B, H, Tq, Dv] and lse [B, H, Tq] (f32) from q, k, v of `dtype`
// (f32, f16 or bf16).
void attention_forward(DType dtype, const AttentionProblem& problem, const void* q, const void* k, const void* v,
                       void* out, float* lse);

// grad_q, grad_k, grad_v (each of its input's shape and dtype) from grad_out,
// recomputing the probabilities from q, k and lse.
void attention_backward(DType dtype, const AttentionProblem& problem, const void* q, const void* k, const void* v,
                        const void* out, const void* grad_out, const float* lse, void* grad_q, void* grad_k,
                        void* grad_v);

}  // namespace mt::kernels::cpu
