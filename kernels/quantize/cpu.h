// The quantize family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/quantize/quantize.h) calls it. Tensors are contiguous and on the
// host; scales f32 and zero points i32, one per channel.
#pragma once

#include "core/tensor.h"
#include "kernels/quantize/api.h"

namespace mt::kernels::cpu {

void int8_quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                   const Tensor& out);
void int8_dequantize(const Tensor& q, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                     const Tensor& out);

}  // namespace mt::kernels::cpu
