// The quantize family's CUDA/sim entry points (cuda.cu) and the plain types
// they share with the CPU back end (cpu.cpp): INT8 inference's affine
// quantization, q = clamp(round(x / scale) + zero_point), and its inverse,
// with one scale and zero point per tensor or per channel of one axis.
// Scales are f32 and zero points i32, both on the data's device.
#pragma once

#include <cstdint>

#include "kernels/common/tensor_ref.h"
#include "runtime/kernel_api.h"
#include "runtime/macros.h"

namespace mt::kernels {

// A contiguous tensor seen as [outer, channels, inner] around its channel
// axis: element i belongs to channel (i / inner) % channels. Per tensor is
// channels = 1 (inner = numel).
struct QuantizeAxis {
  std::int64_t channels = 1, inner = 1;
  MT_HOST_DEVICE std::int64_t channel(std::int64_t i) const { return channels == 1 ? 0 : (i / inner) % channels; }
};

}  // namespace mt::kernels

// out = clamp(round_half_even(x / scales[c]) + zero_points[c]) into out's
// dtype (I8: [-127, 127]; U8: [0, 255]); NaN becomes the zero point.
MT_CUDA_KERNEL_API(void int8_quantize(const mt::kernels::TensorRef& x, const float* scales,
                                      const std::int32_t* zero_points, mt::kernels::QuantizeAxis axis,
                                      const mt::kernels::TensorRef& out, mt::kernels::Stream stream))
// out = (q - zero_points[c]) * scales[c], one f32 multiply rounded once into out's dtype.
MT_CUDA_KERNEL_API(void int8_dequantize(const mt::kernels::TensorRef& q, const float* scales,
                                        const std::int32_t* zero_points, mt::kernels::QuantizeAxis axis,
                                        const mt::kernels::TensorRef& out, mt::kernels::Stream stream))
