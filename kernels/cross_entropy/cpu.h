// The cross_entropy family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/cross_entropy/cross_entropy.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cross_entropy/api.h"

namespace mt::kernels {

struct CrossEntropyArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};

namespace cpu {
void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& row_stats,
                           CrossEntropyArgs args);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& row_stats,
                            const Tensor& grad_loss, const Tensor& grad_logits, CrossEntropyArgs args);
}  // namespace cpu

}  // namespace mt::kernels
