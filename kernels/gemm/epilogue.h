// The GEMM epilogue on the CPU: bias and activation on the unrounded
// product, with the elementwise ops' formulas, as the GPU epilogue does.
// Shared by the Eigen path (cpu.cpp) and the oneDNN path (onednn.cpp) where
// oneDNN cannot fuse it (GELU, or the pre-activation kept for backward).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise/math.h"
#include "kernels/elementwise/vector_gelu.h"
#include "kernels/gemm/api.h"

namespace mt::kernels::cpu {

// The activation with the elementwise ops' formulas.
template <typename T>
inline T activate(GemmActivation activation, T z) {
  switch (activation) {
    case GemmActivation::None: return z;
    case GemmActivation::Relu: return unary_forward<UnaryOp::Relu>(z, T(0), T(0));
    case GemmActivation::GeluErf: return unary_forward<UnaryOp::GeluErf>(z, T(0), T(0));
    case GemmActivation::GeluTanh: return unary_forward<UnaryOp::GeluTanh>(z, T(0), T(0));
  }
  return z;
}

// Bias and activation on the unrounded product, as the GPU epilogue does,
// for the block of rows [r0, r0 + h) and columns [c0, c0 + w) of an m x n
// (row stride n) output; `pre` (or null) receives the pre-activation.
// `bias` is in T (null for none).
// An f32 GELU runs a row at a time through its vectorised form
// (kernels/elementwise/vector_gelu.h), the same formula; `to_16bit`: the
// output will be rounded to bf16 or f16 (the erf form's cheaper erfc).
template <typename T>
inline void apply_epilogue(T* c, T* pre, int64_t n, int64_t r0, int64_t h, int64_t c0, int64_t w, const T* bias,
                           GemmActivation activation, bool to_16bit = false) {
  GeluForward gelu = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (activation == GemmActivation::GeluErf) gelu = vector_gelu_forward(UnaryOp::GeluErf, to_16bit);
    if (activation == GemmActivation::GeluTanh) gelu = gelu_tanh_n;
  }
  for (int64_t r = r0; r < r0 + h; ++r) {
    for (int64_t j = c0; j < c0 + w; ++j) {
      const T z = bias == nullptr ? c[r * n + j] : c[r * n + j] + bias[j];
      if (pre != nullptr) pre[r * n + j] = z;
      c[r * n + j] = gelu != nullptr ? z : activate(activation, z);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (gelu != nullptr) gelu(c + r * n + c0, c + r * n + c0, w);
    }
  }
}

}  // namespace mt::kernels::cpu
