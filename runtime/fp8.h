// FP8 storage types (E4M3 and E5M2) and their conversions from and to f32.
//
//   E4M3 (the "fn" variant, OCP FP8 / NVIDIA's __nv_fp8_e4m3): sign, 4 exponent
//        bits (bias 7), 3 mantissa bits. No infinities: 0x7f/0xff are NaN, so
//        the largest finite value is 0x7e = 1.75 * 2^8 = 448. Smallest normal
//        2^-6, smallest subnormal 2^-9. Weights and activations.
//   E5M2 (IEEE-like: the top byte of an f16): sign, 5 exponent bits (bias 15),
//        2 mantissa bits, +-inf (0x7c/0xfc) and NaN. Largest finite
//        0x7b = 1.75 * 2^15 = 57344; smallest normal 2^-14, smallest
//        subnormal 2^-16. Gradients (range over precision).
//
// f32 -> FP8 follows the GPU's `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`: round
// to nearest, ties to even; a finite value beyond the largest finite one, and
// +-inf, saturate to +-max; NaN stays NaN (written as the canonical 0x7f, as
// mixtape writes f16/bf16 NaN canonically); subnormals are exact. Saturation
// is a choice: PyTorch <= 2.11 eager turns E4M3 overflow (|x| >= 480) into NaN,
// while CUDA's conversion and torch.compile saturate. mixtape takes the GPU's
// rule everywhere, so the CPU, the simulator and a GPU write the same bytes.
//
// Every FP8 value is exactly a bf16 (and f16 for E5M2) value: widening never
// rounds, which is what lets the CPU run FP8 GEMMs as bf16 GEMMs.
//
// These functions are __host__ __device__: the CPU back end, the simulator and
// the GPU kernels share one definition. The hardware's own conversion is
// kernels/common/ptx.h's cvt_fp8x2 (sm_89+; this code on the
// simulator); tests/runtime/sim/gpu_examples.cpp compares the two on a GPU (not run
// on one yet).
#pragma once

#include <cstdint>

#include "runtime/half.h"
#include "runtime/macros.h"

namespace mt {

// The two formats' parameters, shared by the conversions and by code that
// needs a format's range (scales are computed from max_finite).
struct Fp8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinity;
  uint8_t max_finite_bits;
  float max_finite;
  float min_normal;
  float min_subnormal;
};

inline constexpr Fp8Format kE4M3Format{4, 3, 7, false, 0x7e, 448.0f, 0.015625f, 0.001953125f};
inline constexpr Fp8Format kE5M2Format{5, 2, 15, true, 0x7b, 57344.0f, 6.103515625e-05f, 1.52587890625e-05f};

namespace detail {

// f32 -> FP8 bits with kMant mantissa bits and exponent bias kBias.
template <int kMant, int kBias, uint8_t kMaxBits>
MT_HOST_DEVICE inline uint8_t f32_to_fp8_bits(float value) {
  const uint32_t x = float_bits(value);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7fu;  // NaN, canonical
  // The largest finite value as f32 bits: every |x| at or above it (inf
  // included) saturates, and everything below rounds to at most it.
  constexpr uint32_t kMaxF32 = static_cast<uint32_t>(kMaxBits >> kMant) - kBias + 127u;
  constexpr uint32_t kMaxAsF32 = (kMaxF32 << 23) | (static_cast<uint32_t>(kMaxBits & ((1u << kMant) - 1u)) << (23 - kMant));
  if (abs >= kMaxAsF32) return static_cast<uint8_t>(sign | kMaxBits);
  constexpr uint32_t kMinNormalF32 = static_cast<uint32_t>(1 - kBias + 127) << 23;
  constexpr int kDrop = 23 - kMant;  // f32 mantissa bits that rounding removes
  if (abs >= kMinNormalF32) {
    // Re-bias the exponent (127 -> kBias) and drop kDrop bits, nearest even;
    // a carry out of the mantissa moves into the exponent, as it should.
    uint32_t v = abs - (static_cast<uint32_t>(127 - kBias) << 23);
    const uint32_t lsb = (v >> kDrop) & 1u;
    v += (1u << (kDrop - 1)) - 1u + lsb;
    return static_cast<uint8_t>(sign | (v >> kDrop));
  }
  // Below the smallest normal: value = m * 2^(1 - kBias - kMant), m in [0, 2^kMant].
  // Half the smallest subnormal, or less, rounds to zero (the tie goes to even 0).
  constexpr uint32_t kHalfMinSubnormalF32 = static_cast<uint32_t>(127 - kBias - kMant) << 23;
  if (abs <= kHalfMinSubnormalF32) return sign;
  const uint32_t exponent = abs >> 23;
  const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = static_cast<uint32_t>(151 - kBias - kMant) - exponent;  // 22..24
  uint32_t m = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (m & 1u))) ++m;  // m = 2^kMant is the smallest normal
  return static_cast<uint8_t>(sign | m);
}

template <int kMant, int kBias, bool kHasInfinity>
MT_HOST_DEVICE inline float fp8_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  constexpr uint32_t kExpMask = (0x7fu >> kMant);
  const uint32_t exponent = (b >> kMant) & kExpMask;
  const uint32_t mant = b & ((1u << kMant) - 1u);
  if constexpr (kHasInfinity) {
    if (exponent == kExpMask) return bits_float(sign | 0x7f800000u | (mant << (23 - kMant)) | (mant ? 0x400000u : 0u));
  } else {
    if ((b & 0x7fu) == 0x7fu) return bits_float(sign | 0x7fc00000u);
  }
  if (exponent != 0) return bits_float(sign | ((exponent - kBias + 127u) << 23) | (mant << (23 - kMant)));
  // Subnormal (or zero): m * 2^(1 - kBias - kMant), exact in f32.
  const float magnitude = static_cast<float>(mant) * bits_float(static_cast<uint32_t>(128 - kBias - kMant) << 23);
  return bits_float(sign | float_bits(magnitude));
}

}  // namespace detail

MT_HOST_DEVICE MT_INLINE uint8_t f32_to_e4m3_bits(float v) { return detail::f32_to_fp8_bits<3, 7, 0x7e>(v); }
MT_HOST_DEVICE MT_INLINE uint8_t f32_to_e5m2_bits(float v) { return detail::f32_to_fp8_bits<2, 15, 0x7b>(v); }
MT_HOST_DEVICE MT_INLINE float e4m3_bits_to_f32(uint8_t b) { return detail::fp8_bits_to_f32<3, 7, false>(b); }
MT_HOST_DEVICE MT_INLINE float e5m2_bits_to_f32(uint8_t b) { return detail::fp8_bits_to_f32<2, 15, true>(b); }

// Storage types, like Half and BFloat16: no arithmetic, convert to float.
struct Float8E4M3 {
  uint8_t bits = 0;
  Float8E4M3() = default;
  MT_HOST_DEVICE explicit Float8E4M3(float f) : bits(f32_to_e4m3_bits(f)) {}
  MT_HOST_DEVICE operator float() const { return e4m3_bits_to_f32(bits); }
  MT_HOST_DEVICE static Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v;
    v.bits = b;
    return v;
  }
};

struct Float8E5M2 {
  uint8_t bits = 0;
  Float8E5M2() = default;
  MT_HOST_DEVICE explicit Float8E5M2(float f) : bits(f32_to_e5m2_bits(f)) {}
  MT_HOST_DEVICE operator float() const { return e5m2_bits_to_f32(bits); }
  MT_HOST_DEVICE static Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(Float8E4M3) == 1 && sizeof(Float8E5M2) == 1);

}  // namespace mt
