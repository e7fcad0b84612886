// Row-wise softmax math shared by CPU and CUDA: the max-subtracted form, so
// exp never overflows, with the row's statistics kept in f32 (or f64).
#pragma once

#include <cmath>

#include "core/macros.h"

namespace mt::kernels {

// Writes softmax (or log_softmax) of row[0..n) into out; returns log-sum-exp.
template <typename T>
MT_HOST_DEVICE inline T softmax_row(const T* row, T* out, int64_t n, bool log) {
  T max = row[0];
  for (int64_t i = 1; i < n; ++i) max = row[i] > max ? row[i] : max;
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  const T lse = max + std::log(sum);
  if (out != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = log ? row[i] - lse : std::exp(row[i] - lse);
  }
  return lse;
}

// Backward of y = softmax(x): dx = y * (dy - sum(dy * y));
// of y = log_softmax(x):      dx = dy - exp(y) * sum(dy).
template <typename T>
MT_HOST_DEVICE inline void softmax_backward_row(const T* dy, const T* y, T* dx, int64_t n, bool log) {
  T dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += log ? dy[i] : dy[i] * y[i];
  for (int64_t i = 0; i < n; ++i) dx[i] = log ? dy[i] - std::exp(y[i]) * dot : y[i] * (dy[i] - dot);
}

}  // namespace mt::kernels
