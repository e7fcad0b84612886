// The quantize family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/quantize/quantize.h) calls it. Tensors are contiguous and on the
// host; scales f32 and zero points i32, one per channel.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/quantize/api.h"

namespace mt::kernels::cpu {

void int8_quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                   const Tensor& out);
// q[i] = quantize_value(x[i], scale, zero_point, 0, 255) for i < n, on the
// calling thread: the requantizing epilogue of the INT8 GEMM and
// convolution, a row at a time.
void requantize_u8(const float* x, int64_t n, float scale, int32_t zero_point, uint8_t* q);
void int8_dequantize(const Tensor& q, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                     const Tensor& out);

}  // namespace mt::kernels::cpu
