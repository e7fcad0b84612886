// The GEMM epilogue on the CPU: bias and activation on the unrounded
// product, with the elementwise ops' formulas, as the GPU epilogue does.
// Shared by the Eigen path (cpu.cpp) and the oneDNN path (onednn.cpp) where
// oneDNN cannot fuse it (GELU, or the pre-activation kept for backward).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/elementwise/math.h"
#include "kernels/elementwise/vector_unary.h"
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
// (kernels/elementwise/vector_unary.h), the same formula; `to_16bit`: the
// output will be rounded to bf16 or f16 (the erf form's cheaper erfc).
template <typename T>
inline void apply_epilogue(T* c, T* pre, int64_t n, int64_t r0, int64_t h, int64_t c0, int64_t w, const T* bias,
                           GemmActivation activation, bool to_16bit = false) {
  UnaryForwardN gelu = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (activation == GemmActivation::GeluErf) gelu = vector_unary_forward(UnaryOp::GeluErf, to_16bit);
    if (activation == GemmActivation::GeluTanh) gelu = gelu_tanh_n;
  }
  // One plain loop per step and row, so each vectorises: with the
  // activation's switch inside, per element, the INT8 mlp's epilogue (bias
  // and ReLU after the s32 GEMM) ran scalar.
  for (int64_t r = r0; r < r0 + h; ++r) {
    T* row = c + r * n + c0;
    if (bias != nullptr) {
      for (int64_t j = 0; j < w; ++j) row[j] += bias[c0 + j];
    }
    if (pre != nullptr) std::copy_n(row, w, pre + r * n + c0);
    if (gelu != nullptr) {
      if constexpr (std::is_same_v<T, float>) gelu(row, row, w);
    } else if (activation == GemmActivation::Relu) {
      for (int64_t j = 0; j < w; ++j) row[j] = unary_forward<UnaryOp::Relu>(row[j], T(0), T(0));
    } else if (activation != GemmActivation::None) {
      for (int64_t j = 0; j < w; ++j) row[j] = activate(activation, row[j]);
    }
  }
}

}  // namespace mt::kernels::cpu
