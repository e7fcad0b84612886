// The gemm family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/gemm/matmul.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/gemm/api.h"

namespace mt::kernels {

// Applied to each product before its one rounding into out's dtype (in the
// accumulator type): + bias[n] on every row, then the activation; the
// pre-activation (bias added) is also stored when `pre_activation` is given.
// This is what makes a Linear layer (and Linear + ReLU / GELU) one GEMM.
struct GemmEpilogue {
  Tensor bias;  // [N], or undefined
  GemmActivation activation = GemmActivation::None;
  Tensor pre_activation;  // out's shape and dtype, contiguous (as out then must be); or undefined
};

// An INT8 GEMM for quantized inference (post-training static quantization:
// asymmetric u8 activations with one scale and zero point, symmetric s8
// weights with a scale per output channel):
//   out[m, n] = act(scales[n] * sum_k (a[m, k] - a_zero_point) * b[n, k] + bias[n])
// with the sum in s32 (exact), then f32: scales[n] is the activations' scale
// times channel n's weight scale; bias and the activation as GemmEpilogue's,
// on the f32 value, rounded once into out (f32 or bf16, contiguous [m, n]).
struct Int8Gemm {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // [m, k] row-major
  int32_t a_zero_point = 0;
  const int8_t* b = nullptr;      // [n, k] row-major (a Linear's weight)
  const float* scales = nullptr;  // [n]
  const float* bias = nullptr;    // [n] or null
  GemmActivation activation = GemmActivation::None;
};

namespace cpu {
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue = {});

// Through oneDNN's u8 x s8 -> s32 matmul (VNNI's vpdpbusd, AMX) where the
// CPU's INT8 products are native and MT_CPU_GEMM allows it; else an exact
// s32 loop.
void int8_gemm(const Int8Gemm& gemm, const Tensor& out);
}  // namespace cpu

}  // namespace mt::kernels
