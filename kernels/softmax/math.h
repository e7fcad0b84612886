// Row-wise softmax math shared by CPU and CUDA: the max-subtracted form, so
// exp never overflows, with the row's statistics kept in f32 (or f64).
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace mt::kernels {

// A row's softmax statistics: its max and sum_i exp(x_i - max). Results are
// formed from x_i - max (exact for nearby values) and log(sum), never from
// x_i - lse with lse = max + log(sum) rounded: at |x| ~ 1e4 an f32 lse is off
// by up to 5e-4, which would shift every output by that much.
template <typename T>
struct RowStats {
  T max, sum;
};

template <typename T>
MT_HOST_DEVICE inline RowStats<T> row_stats(const T* row, int64_t n) {
  T max = row[0];
  for (int64_t i = 1; i < n; ++i) max = (row[i] > max || row[i] != row[i]) ? row[i] : max;  // a NaN wins
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  return {max, sum};
}

// Writes softmax (or log_softmax) of row[0..n) into out.
template <typename T>
MT_HOST_DEVICE inline void softmax_row(const T* row, T* out, int64_t n, bool log) {
  const RowStats<T> stats = row_stats(row, n);
  const T log_sum = std::log(stats.sum);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = log ? (row[i] - stats.max) - log_sum : std::exp(row[i] - stats.max) / stats.sum;
  }
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
