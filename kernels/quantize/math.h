// The quantize family's per-element formulas, shared by cpu.cpp and
// cuda.cu, so the CPU tests check the very code the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/macros.h"

namespace mt::kernels {

// The integer range of a quantized dtype. I8 stops at -127, not -128, so it
// is symmetric (a symmetric scale maps +-amax to +-127, and -q is always a
// value) and a product of two I8 values never reaches 2^14: the range
// PyTorch's per-channel symmetric weight observers and TensorRT use.
MT_HOST_DEVICE inline std::int32_t quantized_min(DType t) { return t == DType::U8 ? 0 : -127; }
MT_HOST_DEVICE inline std::int32_t quantized_max(DType t) { return t == DType::U8 ? 255 : 127; }

// clamp(round_half_even(x / scale) + zero_point, lo, hi). The quotient is
// one correctly rounded f32 division (PyTorch multiplies by 1 / scale,
// which can differ by one step at a tie); rintf rounds half to even in the
// default rounding mode on both compilers. The clamp happens in float
// before the conversion, so inf and values past int32 saturate instead of
// being undefined; NaN maps to the zero point (the value 0).
MT_HOST_DEVICE inline std::int32_t quantize_value(float x, float scale, std::int32_t zero_point, std::int32_t lo,
                                                  std::int32_t hi) {
  float v = x / scale;
  if (!(v == v)) v = 0.0f;
  v = rintf(v);
  const float low = static_cast<float>(lo - zero_point), high = static_cast<float>(hi - zero_point);
  v = v < low ? low : (v > high ? high : v);
  return static_cast<std::int32_t>(v) + zero_point;
}

MT_HOST_DEVICE inline float dequantize_value(std::int32_t q, float scale, std::int32_t zero_point) {
  return static_cast<float>(q - zero_point) * scale;
}

}  // namespace mt::kernels
