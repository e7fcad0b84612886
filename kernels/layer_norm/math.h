// LayerNorm math shared by CPU and CUDA. Statistics (mean, 1/std) are always
// kept in f32 (f64 for f64 inputs), whatever the input dtype: this is why
// autocast runs layer_norm in f32 and why it is safe in f16 models.
//
// RMSNorm is LayerNorm without the centering (Zhang and Sennrich 2019): the
// mean is taken as 0, so the "variance" is the mean square, xhat = x * rstd,
// and the input gradient loses its mean(g) term. One set of formulas serves
// both, with `centered` false for RMSNorm.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/macros.h"

namespace mt::kernels {

// The per-element formulas both back ends compute (cuda.cu reduces each
// row's sums across a block, the loops below in order).

// 1/std from the biased variance, as LayerNorm defines it.
template <typename T>
MT_HOST_DEVICE inline T layer_norm_rstd(T variance, T eps) {
  return T(1) / std::sqrt(variance + eps);
}

// xhat = (x - mean) * rstd.
template <typename T>
MT_HOST_DEVICE inline T layer_norm_normalize(T x, T mean, T rstd) {
  return (x - mean) * rstd;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w.
template <typename T>
MT_HOST_DEVICE inline T layer_norm_input_grad(T g, T xhat, T rstd, T mean_g, T mean_g_xhat) {
  return rstd * (g - mean_g - xhat * mean_g_xhat);
}

// Row sums in kRowLanes independent partial sums, added in one fixed tree at
// the end: one running sum is a chain of dependent adds (an add's latency per
// element, and the compiler may not reorder float adds), eight lanes become
// vector adds. The order depends only on n, so a row's statistics are the
// same on any thread count and in any batch.
constexpr int kRowLanes = 8;

template <typename T>
struct RowLanes {
  T lane[kRowLanes] = {};

  MT_HOST_DEVICE T total() const {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
};

// term(0) + ... + term(n - 1), element i going to lane i % kRowLanes.
template <typename T, typename Term>
MT_HOST_DEVICE inline T row_sum(int64_t n, Term term) {
  RowLanes<T> sum;
  int64_t i = 0;
  for (; i + kRowLanes <= n; i += kRowLanes) {
    for (int l = 0; l < kRowLanes; ++l) sum.lane[l] += term(i + l);
  }
  for (int l = 0; i < n; ++i, ++l) sum.lane[l] += term(i);
  return sum.total();
}

// y = (x - mean) * rstd * w + b over one row; returns (mean, rstd). Not
// centered (RMSNorm): mean = 0.
template <typename T>
MT_HOST_DEVICE inline void layer_norm_row(const T* x, const T* w, const T* b, T* y, int64_t n, T eps, T* mean_out,
                                          T* rstd_out, bool centered = true) {
  const T mean = centered ? row_sum<T>(n, [x](int64_t i) { return x[i]; }) / static_cast<T>(n) : T(0);
  const T var = row_sum<T>(n, [x, mean](int64_t i) { return (x[i] - mean) * (x[i] - mean); }) / static_cast<T>(n);
  const T rstd = layer_norm_rstd(var, eps);
  for (int64_t i = 0; i < n; ++i) {
    T v = layer_norm_normalize(x[i], mean, rstd);
    if (w != nullptr) v *= w[i];
    if (b != nullptr) v += b[i];
    y[i] = v;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// dx for one row (not centered: mean is 0 and mean(g) drops out).
template <typename T>
MT_HOST_DEVICE inline void layer_norm_backward_row(const T* dy, const T* x, const T* w, T mean, T rstd, T* dx,
                                                   int64_t n, bool centered = true) {
  auto g_at = [dy, w](int64_t i) { return w != nullptr ? dy[i] * w[i] : dy[i]; };
  const T sum_g = centered ? row_sum<T>(n, g_at) : T(0);
  const T sum_g_xhat = row_sum<T>(n, [&](int64_t i) { return g_at(i) * layer_norm_normalize(x[i], mean, rstd); });
  const T inv_n = T(1) / static_cast<T>(n);
  const T mean_g = sum_g * inv_n, mean_g_xhat = sum_g_xhat * inv_n;
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = layer_norm_input_grad(g_at(i), layer_norm_normalize(x[i], mean, rstd), rstd, mean_g, mean_g_xhat);
  }
}

}  // namespace mt::kernels
