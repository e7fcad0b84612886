// Cross-entropy fused with log_softmax, over logits [N, C] and i64 class
// indices [N]. Per-row losses (and each row's log-sum-exp, for backward) are
// written in f32 (f64 for f64 logits); the reduction is the caller's.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

struct CrossEntropyArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};

namespace cpu {
void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& lse,
                           CrossEntropyArgs args);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& grad_loss,
                            const Tensor& grad_logits, CrossEntropyArgs args);
}  // namespace cpu

inline void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& lse,
                                  CrossEntropyArgs args) {
  backend_for(loss.device(), "cross_entropy");
  cpu::cross_entropy_forward(logits, target, loss, lse, args);
}
inline void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                   const Tensor& grad_loss, const Tensor& grad_logits, CrossEntropyArgs args) {
  backend_for(grad_logits.device(), "cross_entropy_backward");
  cpu::cross_entropy_backward(logits, target, lse, grad_loss, grad_logits, args);
}

}  // namespace mt::kernels
