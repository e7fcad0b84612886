// GELU in its erf form over arrays of floats, with the vectorised erfc and
// exp of kernels/common/vector_math.h: the formulas of unary_forward and
// unary_backward<GeluErf> (kernels/elementwise/math.h) in the same order of
// operations, a block of 256 values at a time on the stack. libm's scalar
// erfcf was 10% of a bf16 bert-tiny step. Used by the elementwise CPU
// kernel and by the CPU GEMM epilogue (a fused Linear + GELU).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/vector_math.h"
#include "kernels/elementwise/math.h"

namespace mt::kernels::cpu {

inline constexpr int64_t kGeluBlock = 256;

// y[i] = 0.5 x[i] erfc(-x[i] / sqrt 2); x may be y.
inline void gelu_erf_n(const float* x, float* y, int64_t n) {
  float t[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) t[i] = -x[b + i] * static_cast<float>(kInvSqrt2);
    erfc_n(t, t, m);
    for (int64_t i = 0; i < m; ++i) y[b + i] = 0.5f * x[b + i] * t[i];
  }
}

// dx[i] = g[i] (Phi(x) + x phi(x)), Phi(x) = 0.5 erfc(-x / sqrt 2), phi the normal density.
inline void gelu_erf_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  float t[kGeluBlock], u[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) {
      t[i] = -x[b + i] * static_cast<float>(kInvSqrt2);
      u[i] = -0.5f * x[b + i] * x[b + i];
    }
    erfc_n(t, t, m);
    exp_n(u, u, m);
    for (int64_t i = 0; i < m; ++i) {
      const float cdf = 0.5f * t[i], pdf = static_cast<float>(kInvSqrt2Pi) * u[i];
      dx[b + i] = g[b + i] * (cdf + x[b + i] * pdf);
    }
  }
}

}  // namespace mt::kernels::cpu
