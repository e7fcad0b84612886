// The unary ops whose formulas call transcendentals, over arrays of floats
// with the vectorised exp, log, tanh and erfc of kernels/common/vector_math.h
// (SLEEF, 8 lanes): exp, log, tanh, sigmoid, SiLU, and GELU in its erf form
// (BERT) and its tanh form (GPT-2). Each is the formula of unary_forward /
// unary_backward (kernels/elementwise/math.h) in the same order of
// operations, a block of 256 values at a time on the stack where it needs
// a temporary. libm's scalar erfcf was 10% of a bf16 bert-tiny step; the
// tanh form's scalar expf (two per element in its backward) about 12% of
// gpt-small's. Used by the elementwise CPU kernel and by the CPU GEMM
// epilogue (a fused Linear + GELU). Results that are rounded to bf16 or f16
// take a cheaper erfc (erfc_16bit_n): SLEEF's erfcf8_u15 was 18% of a bf16
// bert-tiny step; with it bert-tiny bf16 trains 1.24x faster (28007 ->
// 34989 and 34500 -> 42888 tokens/s, side by side, 2 threads, 2026-12-05),
// and all of GELU is about 8% of the step.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/vector_math.h"
#include "kernels/elementwise/math.h"

namespace mt::kernels::cpu {

inline constexpr int64_t kGeluBlock = 256;

using ErfcN = void (*)(const float*, float*, int64_t);

// y[i] = 0.5 x[i] erfc(-x[i] / sqrt 2); x may be y.
template <ErfcN Erfc>
inline void gelu_erf_with(const float* x, float* y, int64_t n) {
  float t[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) t[i] = -x[b + i] * static_cast<float>(kInvSqrt2);
    Erfc(t, t, m);
    for (int64_t i = 0; i < m; ++i) y[b + i] = 0.5f * x[b + i] * t[i];
  }
}

// dx[i] = g[i] (Phi(x) + x phi(x)), Phi(x) = 0.5 erfc(-x / sqrt 2), phi the normal density.
template <ErfcN Erfc>
inline void gelu_erf_backward_with(const float* x, const float* g, float* dx, int64_t n) {
  float t[kGeluBlock], u[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) {
      t[i] = -x[b + i] * static_cast<float>(kInvSqrt2);
      u[i] = -0.5f * x[b + i] * x[b + i];
    }
    Erfc(t, t, m);
    exp_n(u, u, m);
    for (int64_t i = 0; i < m; ++i) {
      const float cdf = 0.5f * t[i], pdf = static_cast<float>(kInvSqrt2Pi) * u[i];
      dx[b + i] = g[b + i] * (cdf + x[b + i] * pdf);
    }
  }
}

// The erf form in f32 (erfc within SLEEF's 1.5 ulp), and for results
// rounded to bf16 or f16 (erfc_16bit_n: within 5e-6).
inline void gelu_erf_n(const float* x, float* y, int64_t n) { gelu_erf_with<erfc_n>(x, y, n); }
inline void gelu_erf_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  gelu_erf_backward_with<erfc_n>(x, g, dx, n);
}
inline void gelu_erf_16bit_n(const float* x, float* y, int64_t n) { gelu_erf_with<erfc_16bit_n>(x, y, n); }
inline void gelu_erf_backward_16bit_n(const float* x, const float* g, float* dx, int64_t n) {
  gelu_erf_backward_with<erfc_16bit_n>(x, g, dx, n);
}

// The tanh form: y = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
// sigmoid(z) = 1 / (1 + exp(-z)).
inline void gelu_tanh_n(const float* x, float* y, int64_t n) {
  float t[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) {
      const float v = x[b + i];
      const float inner = static_cast<float>(kSqrt2OverPi) * (v + 0.044715f * v * v * v);
      t[i] = -(2.0f * inner);
    }
    exp_n(t, t, m);
    for (int64_t i = 0; i < m; ++i) y[b + i] = x[b + i] * (1.0f / (1.0f + t[i]));
  }
}

// dx = g (s + 2 x s (1 - s) u'), s = sigmoid(2u), 1 - s = sigmoid(-2u).
inline void gelu_tanh_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  float e_minus[kGeluBlock], e_plus[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) {
      const float v = x[b + i], x2 = v * v;
      const float inner = static_cast<float>(kSqrt2OverPi) * (v + 0.044715f * x2 * v);
      e_minus[i] = -(2.0f * inner);  // sigmoid(2u) = 1 / (1 + exp(-2u))
      e_plus[i] = -(-2.0f * inner);  // sigmoid(-2u) = 1 / (1 + exp(2u))
    }
    exp_n(e_minus, e_minus, m);
    exp_n(e_plus, e_plus, m);
    for (int64_t i = 0; i < m; ++i) {
      const float v = x[b + i], x2 = v * v;
      const float s = 1.0f / (1.0f + e_minus[i]), not_s = 1.0f / (1.0f + e_plus[i]);
      const float dinner = static_cast<float>(kSqrt2OverPi) * (1.0f + static_cast<float>(3 * 0.044715) * x2);
      dx[b + i] = g[b + i] * (s + 2.0f * v * s * not_s * dinner);
    }
  }
}

// sigmoid(x) = 1 / (1 + exp(-x)) (math.h's sigmoid), then y = then(x, sigmoid).
template <typename Then>
inline void with_sigmoid(const float* x, float* y, int64_t n, Then then) {
  float t[kGeluBlock];
  for (int64_t b = 0; b < n; b += kGeluBlock) {
    const int64_t m = std::min(kGeluBlock, n - b);
    for (int64_t i = 0; i < m; ++i) t[i] = -x[b + i];
    exp_n(t, t, m);
    for (int64_t i = 0; i < m; ++i) y[b + i] = then(b + i, 1.0f / (1.0f + t[i]));
  }
}

inline void sigmoid_n(const float* x, float* y, int64_t n) {
  with_sigmoid(x, y, n, [](int64_t, float s) { return s; });
}

// SiLU: y = x sigmoid(x); dx = g s (1 + x (1 - s)), s = sigmoid(x).
inline void silu_n(const float* x, float* y, int64_t n) {
  with_sigmoid(x, y, n, [x](int64_t i, float s) { return x[i] * s; });
}
inline void silu_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  with_sigmoid(x, dx, n, [x, g](int64_t i, float s) { return g[i] * s * (1.0f + x[i] * (1.0f - s)); });
}

// The vectorised form of a unary op's forward (its backward), or null where
// the op calls no transcendental (or its backward reads only y, as tanh's and
// sigmoid's do); `to_16bit`: the results will be rounded to bf16 or f16.
using UnaryForwardN = void (*)(const float*, float*, int64_t);
using UnaryBackwardN = void (*)(const float*, const float*, float*, int64_t);
inline UnaryForwardN vector_unary_forward(UnaryOp op, bool to_16bit = false) {
  switch (op) {
    case UnaryOp::GeluErf: return to_16bit ? gelu_erf_16bit_n : gelu_erf_n;
    case UnaryOp::GeluTanh: return gelu_tanh_n;
    case UnaryOp::Exp: return exp_n;
    case UnaryOp::Log: return log_n;
    case UnaryOp::Tanh: return tanh_n;
    case UnaryOp::Sigmoid: return sigmoid_n;
    case UnaryOp::Silu: return silu_n;
    default: return nullptr;
  }
}
inline UnaryBackwardN vector_unary_backward(UnaryOp op, bool to_16bit = false) {
  switch (op) {
    case UnaryOp::GeluErf: return to_16bit ? gelu_erf_backward_16bit_n : gelu_erf_backward_n;
    case UnaryOp::GeluTanh: return gelu_tanh_backward_n;
    case UnaryOp::Silu: return silu_backward_n;
    default: return nullptr;
  }
}

}  // namespace mt::kernels::cpu
