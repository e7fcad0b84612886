// LayerNorm math shared by CPU and CUDA. Statistics (mean, 1/std) are always
// kept in f32 (f64 for f64 inputs), whatever the input dtype: this is why
// autocast runs layer_norm in f32 and why it is safe in f16 models.
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace mt::kernels {

// y = (x - mean) * rstd * w + b over one row; returns (mean, rstd).
template <typename T>
MT_HOST_DEVICE inline void layer_norm_row(const T* x, const T* w, const T* b, T* y, int64_t n, T eps, T* mean_out,
                                          T* rstd_out) {
  T mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<T>(n);
  T var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<T>(n);  // biased variance, as LayerNorm defines it
  const T rstd = T(1) / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) {
    T v = (x[i] - mean) * rstd;
    if (w != nullptr) v *= w[i];
    if (b != nullptr) v += b[i];
    y[i] = v;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dx for one row: rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w.
template <typename T>
MT_HOST_DEVICE inline void layer_norm_backward_row(const T* dy, const T* x, const T* w, T mean, T rstd, T* dx,
                                                   int64_t n) {
  T sum_g = 0, sum_g_xhat = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T g = w != nullptr ? dy[i] * w[i] : dy[i];
    const T xhat = (x[i] - mean) * rstd;
    sum_g += g;
    sum_g_xhat += g * xhat;
  }
  const T inv_n = T(1) / static_cast<T>(n);
  for (int64_t i = 0; i < n; ++i) {
    const T g = w != nullptr ? dy[i] * w[i] : dy[i];
    const T xhat = (x[i] - mean) * rstd;
    dx[i] = rstd * (g - sum_g * inv_n - xhat * sum_g_xhat * inv_n);
  }
}

}  // namespace mt::kernels
