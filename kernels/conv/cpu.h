// The conv family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/conv/conv.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv/api.h"

namespace mt::kernels {

// Everything about a convolution's shape, computed once by the op.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;
};

namespace cpu {
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry,
                    const Tensor& y);
// Any of dx, dweight, dbias may be undefined (not needed).
void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Conv2dGeometry& geometry,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
}  // namespace cpu

}  // namespace mt::kernels
