// 2-D convolution (cross-correlation, as in PyTorch) over NCHW tensors.
//
// x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] (may be undefined),
// y [N, O, OH, OW]. The CPU kernels lower each sample and group to one GEMM:
// im2col unrolls the receptive fields into a [C/groups*KH*KW, OH*OW] matrix,
// y_g = W_g @ col. Backward: dW_g += dy_g @ col^T, dcol = W_g^T @ dy_g folded
// back into dx by col2im, dbias = sum of dy over N, OH, OW.
#pragma once

#include "kernels/dispatch.h"

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

inline void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry,
                           const Tensor& y) {
  if (backend_for(y.device(), "conv2d") != Backend::Cpu) {
    fail("conv2d: no CUDA kernel yet (tensor on {}); run it on the CPU", y.device());
  }
  cpu::conv2d_forward(x, weight, bias, geometry, y);
}
inline void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Conv2dGeometry& geometry,
                            const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  if (backend_for(dy.device(), "conv2d_backward") != Backend::Cpu) {
    fail("conv2d_backward: no CUDA kernel yet (tensor on {}); run it on the CPU", dy.device());
  }
  cpu::conv2d_backward(dy, x, weight, geometry, dx, dweight, dbias);
}

}  // namespace mt::kernels
