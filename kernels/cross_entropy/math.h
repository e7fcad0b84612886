// Cross-entropy's per-element formulas, shared by cpu.cpp and cuda.cu. With
// label smoothing eps over C classes the target distribution is
//   q_c = (1 - eps) * onehot(target)_c + eps / C
// and, from the row's statistics max and log_sum = log sum_c exp(x_c - max)
// (kernels/softmax/math.h), every term is formed from x - max, so a shared
// offset of 1e4 in the logits costs no precision:
//   loss = (1 - eps) (log_sum - (x_t - max)) + eps/C * sum_c (log_sum - (x_c - max))
//   dloss/dx_c = softmax(x)_c - q_c = exp((x_c - max) - log_sum) - q_c
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace mt::kernels {

// q_c: the smoothed target probability of class c.
template <typename T>
MT_HOST_DEVICE inline T cross_entropy_target_probability(bool is_target, T smoothing, T classes) {
  return (is_target ? T(1) - smoothing : T(0)) + smoothing / classes;
}

// The target's share of the loss, from its shifted logit x_t - max.
template <typename T>
MT_HOST_DEVICE inline T cross_entropy_target_loss(T shifted_target, T log_sum, T smoothing) {
  return (T(1) - smoothing) * (log_sum - shifted_target);
}

// The smoothing share, given sum_c (log_sum - (x_c - max)) over the row.
template <typename T>
MT_HOST_DEVICE inline T cross_entropy_smoothing_loss(T sum_of_negative_log_probabilities, T smoothing, T classes) {
  return smoothing / classes * sum_of_negative_log_probabilities;
}

// dloss/dx_c times the upstream gradient.
template <typename T>
MT_HOST_DEVICE inline T cross_entropy_logit_grad(T grad, T shifted, T log_sum, T target_probability) {
  return grad * (std::exp(shifted - log_sum) - target_probability);
}

}  // namespace mt::kernels
