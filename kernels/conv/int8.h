// The INT8 convolution (kernels/conv/cpu.h's Int8Conv2d), dispatched. The
// CPU's is kernels/conv/int8.cpp (oneDNN's u8 x s8 convolution, or im2row
// + the INT8 GEMM). On sim and CUDA: the patches gathered on the device
// (int8.cu), the INT8 GEMM (kernels/gemm/int8.h: the v9 Tensor Core rung,
// known-answer-checked on a GPU) with the scales, bias and activation in its
// epilogue, and its [N*OH*OW, O] result copied into y's NCHW.
#pragma once

#include "kernels/conv/api.h"
#include "kernels/conv/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/int8.h"

namespace mt::kernels {

// y (f32 or bf16 [N, O, OH, OW], contiguous, on the operands' device) = conv's formula.
inline void int8_conv2d(const cpu::Int8Conv2d& conv, const Tensor& y) {
  const Backend backend = backend_for(y.device(), "int8_conv2d");
  if (backend == Backend::Cpu) return cpu::int8_conv2d(conv, y);
  const ConvShape& g = conv.shape;
  MT_CHECK(y.dtype() != kU8, "int8_conv2d: a requantized u8 output is the CPU's only (on {} it is f32 or bf16)",
           y.device());
  MT_CHECK(g.groups == 1, "int8_conv2d: grouped convolutions are not supported (groups = {})", g.groups);
  MT_CHECK(conv.x_zero_point >= 0 && conv.x_zero_point <= 255, "int8_conv2d: a u8 zero point is in [0, 255], got {}",
           conv.x_zero_point);
  const int64_t rows = g.batch * g.out_plane();
  if (rows == 0 || g.out_channels == 0) return;
  const Tensor patches = empty({rows, g.patch()}, kU8, y.device());
  MT_DEVICE_CALL(backend, int8_im2row, conv.x, static_cast<uint8_t>(conv.x_zero_point), g,
                 static_cast<uint8_t*>(patches.data_ptr()), launch_stream(y.device()));
  mark_written(patches);
  const Tensor product = empty({rows, g.out_channels}, y.dtype(), y.device());
  int8_gemm({.m = rows,
             .n = g.out_channels,
             .k = g.patch(),
             .a = static_cast<const uint8_t*>(patches.data_ptr()),
             .a_zero_point = conv.x_zero_point,
             .b = conv.weight,
             .scales = conv.scales,
             .bias = conv.bias,
             .activation = conv.activation},
            product);
  // [N, plane, O] -> [N, O, plane]: y's layout.
  copy(product.reshape({g.batch, g.out_plane(), g.out_channels}).permute({0, 2, 1}),
       y.reshape({g.batch, g.out_channels, g.out_plane()}));
}

}  // namespace mt::kernels
