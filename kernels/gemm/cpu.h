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

namespace cpu {
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue = {});

// Through oneDNN's u8 x s8 -> s32 matmul (VNNI's vpdpbusd, AMX) where the
// CPU's INT8 products are native and MT_CPU_GEMM allows it; else an exact
// s32 loop.
void int8_gemm(const Int8Gemm& gemm, const Tensor& out);
// What every INT8 GEMM needs of its arguments and out (contiguous f32 or
// bf16 [m, n], a u8 zero point, operands and scales given); an mt::Error
// otherwise. The CUDA path's dispatcher (kernels/gemm/int8.h) runs it too.
void check_int8_gemm(const Int8Gemm& gemm, const Tensor& out);
// A u8 output's scale and zero point (Int8Gemm, Int8Conv2d); an mt::Error
// naming `what` unless the scale is finite and positive and the zero point
// in [0, 255].
void check_requantization(float scale, int32_t zero_point, const char* what);
}  // namespace cpu

}  // namespace mt::kernels
