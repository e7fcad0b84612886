// The conv family's oneDNN path on the CPU (onednn.cpp), tried by
// cpu::conv2d_forward / conv2d_backward before the im2col + Eigen path.
// Built only where CMake found oneDNN (MT_WITH_ONEDNN).
#pragma once

#include "core/tensor.h"
#include "kernels/conv/api.h"
#include "kernels/conv/cpu.h"

namespace mt::kernels::cpu {

#if MT_WITH_ONEDNN
// y = conv(x, weight) + bias through oneDNN, when it takes the case (f32 or
// bf16, an optimised kernel for this CPU) and MT_CPU_GEMM allows it. Returns
// false, having written nothing, when it does not.
bool onednn_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                           const Tensor& y);
// dx and dweight (either may be undefined) through oneDNN, under the same
// conditions. The bias gradient is not computed here.
bool onednn_conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                            const Tensor& dx, const Tensor& dweight);
// sums (s32 NCHW, contiguous) = sum (x - zero point) w, the INT8
// convolution before its scales, bias and activation, through oneDNN's u8 x
// s8 convolution (VNNI's vpdpbusd, AMX) where the CPU's INT8 products are
// native and MT_CPU_GEMM allows it. Returns false, having written nothing,
// when it does not.
bool onednn_int8_conv2d(const Int8Conv2d& conv, int32_t* sums);
#else
inline bool onednn_int8_conv2d(const Int8Conv2d&, int32_t*) { return false; }
inline bool onednn_conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const ConvShape&, const Tensor&) {
  return false;
}
inline bool onednn_conv2d_backward(const Tensor&, const Tensor&, const Tensor&, const ConvShape&, const Tensor&,
                                   const Tensor&) {
  return false;
}
#endif

}  // namespace mt::kernels::cpu
