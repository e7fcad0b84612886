// The conv family's oneDNN path on the CPU (onednn.cpp), tried by
// cpu::conv2d_forward / conv2d_backward before the im2col + Eigen path.
// Built only where CMake found oneDNN (MT_WITH_ONEDNN).
#pragma once

#include <functional>

#include "core/host_scratch.h"
#include "core/tensor.h"
#include "kernels/conv/api.h"
#include "kernels/conv/cpu.h"

namespace mt::kernels::cpu {

// Where onednn_int8_conv2d (below) left an INT8 convolution's s32 sums.
enum class Int8SumsLayout { None, Nchw, ChannelsLast };

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
// The s32 sums = sum (x - zero point) w, the INT8 convolution before its
// scales, bias and activation, through oneDNN's u8 x s8 convolution (VNNI's
// vpdpbusd, AMX) where the CPU's INT8 products are native and MT_CPU_GEMM
// allows it. oneDNN's VNNI kernels write them channels-last
// ([N, OH, OW, O]): then they land in `channels_last` (allocated here) as
// written, and the caller reads them transposed, which costs less than
// oneDNN's reorder of the s32 output into NCHW (measured: the reorder took
// longer than the convolution). Any other layout is reordered into
// nchw_sums() (s32 NCHW, contiguous). None, having written nothing, where
// oneDNN does not take the convolution.
Int8SumsLayout onednn_int8_conv2d(const Int8Conv2d& conv, const std::function<int32_t*()>& nchw_sums,
                                  HostScratch<int32_t>& channels_last);
#else
inline Int8SumsLayout onednn_int8_conv2d(const Int8Conv2d&, const std::function<int32_t*()>&, HostScratch<int32_t>&) {
  return Int8SumsLayout::None;
}
inline bool onednn_conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const ConvShape&, const Tensor&) {
  return false;
}
inline bool onednn_conv2d_backward(const Tensor&, const Tensor&, const Tensor&, const ConvShape&, const Tensor&,
                                   const Tensor&) {
  return false;
}
#endif

}  // namespace mt::kernels::cpu
