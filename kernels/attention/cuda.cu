// The fused attention entry points (declared in kernels/attention/api.h):
// delta first for either backward, then the rung the caller names.
#include "kernels/attention/flash_common.h"

namespace mt::MT_KERNEL_NS {

void attention_forward(kernels::KernelDType dtype, const kernels::AttentionProblem& problem,
                       kernels::AttentionKernel kernel, const void* q, const void* k, const void* v, void* out,
                       float* lse, Stream stream) {
  if (problem.batch * problem.heads * problem.q_len == 0) return;
  if (kernel == kernels::AttentionKernel::V3TensorCore) {
    attention::v3_forward(dtype, problem, q, k, v, out, lse, stream);
  } else {
    attention::v2_forward(dtype, problem, q, k, v, out, lse, stream);
  }
}

void attention_backward(kernels::KernelDType dtype, const kernels::AttentionProblem& problem,
                        kernels::AttentionKernel kernel, const void* q, const void* k, const void* v, const void* out,
                        const void* grad_out, const float* lse, float* delta, void* grad_q, void* grad_k, void* grad_v,
                        Stream stream) {
  if (problem.batch * problem.heads == 0) return;
  attention::backward_delta(dtype, problem, out, grad_out, delta, stream);
  if (kernel == kernels::AttentionKernel::V3TensorCore) {
    attention::v3_backward(dtype, problem, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
  } else {
    attention::v2_backward(dtype, problem, q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, stream);
  }
}

}  // namespace mt::MT_KERNEL_NS
