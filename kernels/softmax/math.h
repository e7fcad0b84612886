// Row-wise softmax math shared by CPU and CUDA: the max-subtracted form, so
// exp never overflows, with the row's statistics kept in f32 (or f64). The
// per-element formulas (softmax_from_shifted, softmax_backward_*) are what
// both back ends compute; how a row's statistics are reduced differs (a loop
// here, one block per row with warp shuffles in cuda.cu).
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

// One output from the shifted logit x - max, the row's log(sum) and 1/sum,
// sum = sum_i exp(x_i - max): exp(x - max) / sum rather than exp(x - lse),
// since x - max is exact while max + log(sum) would lose log(sum)'s low bits
// next to a large max.
template <typename T>
MT_HOST_DEVICE inline T softmax_from_shifted(T shifted, T log_sum, T inv_sum, bool log) {
  return log ? shifted - log_sum : std::exp(shifted) * inv_sum;
}

// Backward of y = softmax(x): dx = y * (dy - sum(dy * y));
// of y = log_softmax(x):      dx = dy - exp(y) * sum(dy).
// The row's sum is of softmax_backward_dot_term; each dx is softmax_backward_from_dot.
template <typename T>
MT_HOST_DEVICE inline T softmax_backward_dot_term(T dy, T y, bool log) {
  return log ? dy : dy * y;
}
template <typename T>
MT_HOST_DEVICE inline T softmax_backward_from_dot(T dy, T y, T dot, bool log) {
  return log ? dy - std::exp(y) * dot : y * (dy - dot);
}

// Writes softmax (or log_softmax) of row[0..n) into out.
template <typename T>
MT_HOST_DEVICE inline void softmax_row(const T* row, T* out, int64_t n, bool log) {
  const RowStats<T> stats = row_stats(row, n);
  const T log_sum = std::log(stats.sum), inv_sum = T(1) / stats.sum;
  for (int64_t i = 0; i < n; ++i) out[i] = softmax_from_shifted(row[i] - stats.max, log_sum, inv_sum, log);
}

template <typename T>
MT_HOST_DEVICE inline void softmax_backward_row(const T* dy, const T* y, T* dx, int64_t n, bool log) {
  T dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += softmax_backward_dot_term(dy[i], y[i], log);
  for (int64_t i = 0; i < n; ++i) dx[i] = softmax_backward_from_dot(dy[i], y[i], dot, log);
}

}  // namespace mt::kernels
