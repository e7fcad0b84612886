// The conv family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/conv/conv.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv/api.h"
#include "kernels/gemm/api.h"

namespace mt::kernels {

namespace cpu {
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                    const Tensor& y);
// Any of dx, dweight, dbias may be undefined (not needed).
void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias);

// The INT8 convolution of quantized inference (int8.cpp): u8 input [N, C,
// H, W] with one zero point, s8 weight [O, C, kH, kW] (groups 1), per output
// channel scales (input scale x weight scale), bias and activation on the
// f32 value, one rounding into y (f32 or bf16, [N, O, OH, OW] contiguous):
//   y[n, o, p] = act(scales[o] * sum_k (patch(x)[p, k] - x_zero_point) w[o, k] + bias[o])
// or, for a u8 y, that value requantized for the next INT8 layer
// (Int8Gemm's out_scale and out_zero_point). Padding reads as the zero
// point (the value 0), exactly as the float convolution pads with 0.
struct Int8Conv2d {
  ConvShape shape;
  const uint8_t* x = nullptr;
  int32_t x_zero_point = 0;
  const int8_t* weight = nullptr;
  const float* scales = nullptr;
  const float* bias = nullptr;  // or null
  GemmActivation activation = GemmActivation::None;
  float out_scale = 0;  // a u8 y's requantization
  int32_t out_zero_point = 0;
};
void int8_conv2d(const Int8Conv2d& conv, const Tensor& y);
}  // namespace cpu

}  // namespace mt::kernels
