// The fp8 family's formulas, once, for the CPU back end (cpu.cpp) and the
// CUDA/sim kernels (cuda.cu).
//
// A scale maps a tensor's range onto the format's: q = fp8(x * scale), and
// x is read back as value(q) * scale_inv with scale_inv = 1 / scale (the FP32
// scale Transformer Engine keeps beside its FP8 data). The scale comes from
// an amax: scale = format_max / amax * 2^-margin, so the largest |x| lands on
// the format's largest finite value (less the margin).
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/fp8.h"
#include "runtime/macros.h"
#include "kernels/fp8/api.h"

namespace mt::kernels {

// amax below this counts as this: a group of zeros (or denormal dust) gets a
// large finite scale instead of inf (torchao's floor; a zero amax made a NaN
// scale in a run REFERENCES.md cites).
inline constexpr float kFp8AmaxFloor = 1e-12f;

MT_HOST_DEVICE inline bool fp8_finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

// |x| as ordered bits: for non-negative floats (and NaN, which sorts above
// inf) the integer order is the float order, so max is an integer max.
MT_HOST_DEVICE inline uint32_t fp8_abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }

// Current scaling (the scale is used on the data it came from): amax is
// floored, and a non-finite amax (the data holds inf or NaN) gives scale 1.
MT_HOST_DEVICE inline float fp8_current_scale(float amax, Fp8ScaleRule rule) {
  if (!fp8_finite(amax)) return 1.0f;
  const float floored = amax > kFp8AmaxFloor ? amax : kFp8AmaxFloor;
  return rule.format_max / floored * rule.margin_factor;
}

// Delayed scaling, Transformer Engine's rule (_default_sf_compute): the scale
// for the next steps; an amax that is 0 or not finite keeps the previous
// scale (an all-zero or overflowing step must not poison the steps after it).
MT_HOST_DEVICE inline float fp8_delayed_scale(float amax, Fp8ScaleRule rule, float previous_scale) {
  if (!fp8_finite(amax) || !(amax > 0.0f)) return previous_scale;
  return rule.format_max / amax * rule.margin_factor;
}

// One delayed-scaling step for one tensor, after its quantizations wrote
// their amax into history[0] (Transformer Engine's
// _default_get_amax_and_update_history, then _default_sf_compute):
// amax = max(history) (or history[0] for most_recent); the scale from it;
// then the history rolls left by one (history[i] = history[i + 1], the last
// slot takes the old history[0]) and history[0] starts the next step at 0.
MT_HOST_DEVICE inline void fp8_delayed_step(float* history, int64_t length, bool most_recent, Fp8ScaleRule rule,
                                            float* scale, float* scale_inv) {
  uint32_t amax_bits = fp8_abs_bits(history[0]);
  if (!most_recent) {
    for (int64_t i = 1; i < length; ++i) {  // a max as ordered bits: a NaN anywhere wins, as in torch.max
      const uint32_t bits = fp8_abs_bits(history[i]);
      amax_bits = bits > amax_bits ? bits : amax_bits;
    }
  }
  *scale = fp8_delayed_scale(bits_float(amax_bits), rule, *scale);
  *scale_inv = 1.0f / *scale;
  const float newest = history[0];
  for (int64_t i = 0; i + 1 < length; ++i) history[i] = history[i + 1];
  history[length - 1] = newest;
  history[0] = 0.0f;
}

// One element into FP8 bits of `format` (F8E4M3 or F8E5M2).
MT_HOST_DEVICE inline uint8_t fp8_quantize_value(float x, float scale, DType format) {
  const float scaled = x * scale;
  return format == DType::F8E4M3 ? f32_to_e4m3_bits(scaled) : f32_to_e5m2_bits(scaled);
}

MT_HOST_DEVICE inline float fp8_dequantize_value(uint8_t q, float scale_inv, DType format) {
  return (format == DType::F8E4M3 ? e4m3_bits_to_f32(q) : e5m2_bits_to_f32(q)) * scale_inv;
}


// Was x clipped at the format's largest finite value (|x * scale| > max)?
MT_HOST_DEVICE inline bool fp8_saturated(float x, float scale_inv, DType format) {
  const float max = format == DType::F8E4M3 ? kE4M3Format.max_finite : kE5M2Format.max_finite;
  return !(x <= max * scale_inv && x >= -max * scale_inv) && x == x;  // inf counts; NaN does not
}
// Did a non-zero x become +-0 (underflow below half the smallest subnormal)?
MT_HOST_DEVICE inline bool fp8_flushed(uint8_t q, float x) { return (q & 0x7fu) == 0 && x != 0.0f; }

// The scale group of element (row, col).
MT_HOST_DEVICE inline int64_t fp8_group_of(const Fp8Groups& g, int64_t row, int64_t col) {
  return (row / g.group_rows) * g.group_columns() + col / g.group_cols;
}

// One output element of the FP8 GEMM from its per-K-group partial products
// (`product` points at element (0, m, n); groups are m_by_n apart).
MT_HOST_DEVICE inline float fp8_combine_element(const float* product, int64_t m_by_n, int64_t k_groups, int64_t k_group,
                                                const float* a_scale_inv, const Fp8Groups& a_groups, int64_t m,
                                                const float* b_scale_inv, const Fp8Groups& b_groups, int64_t n) {
  float acc = 0.0f;
  for (int64_t g = 0; g < k_groups; ++g) {
    const float a_inv = a_scale_inv[fp8_group_of(a_groups, m, g * k_group)];
    const float b_inv = b_scale_inv[fp8_group_of(b_groups, n, g * k_group)];
    acc += product[g * m_by_n] * (a_inv * b_inv);
  }
  return acc;
}

}  // namespace mt::kernels
