// F16 (IEEE binary16) and BF16 (bfloat16) storage types and their conversions.
//
// Both are plain 16-bit patterns; arithmetic happens in f32 (load, compute,
// round once on store), exactly as mixtape's GPU kernels do. The conversions
// are bit-exact with the hardware's round-to-nearest-even (cvt.rn.f16.f32 and
// cvt.rn.bf16.f32), including the edges that AMP is about:
//   f16: largest finite 65504; 65520 and above round to inf; smallest normal
//        2^-14 = 6.10e-5; smallest subnormal 2^-24 = 5.96e-8; anything at or
//        below 2^-25 (half the smallest subnormal) rounds to zero (ties to even).
//   bf16: f32's 8-bit exponent (range up to 3.39e38) with an 8-bit significand
//        (7 stored bits), so it almost never overflows but keeps ~3 decimal digits.
// These functions are __host__ __device__ so the CPU backend, the SIMT
// simulator and the GPU kernels share one definition.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/macros.h"

namespace mt {

MT_HOST_DEVICE MT_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
MT_HOST_DEVICE MT_INLINE float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// f32 -> f16 bits, round to nearest, ties to even.
MT_HOST_DEVICE inline uint16_t f32_to_f16_bits(float value) {
  const uint32_t x = float_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  // NaN becomes the canonical 0x7fff, as the GPU's cvt.rn.f16.f32 gives it,
  // so a NaN written by the CPU, the simulator and a GPU has the same bits.
  if (abs > 0x7f800000u) return 0x7fffu;
  if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: overflow to inf
  if (abs >= 0x38800000u) {                                              // normal f16 (>= 2^-14)
    // Re-bias the exponent (127 -> 15) and drop 13 mantissa bits with RNE.
    uint32_t mant = abs + 0xc8000000u;  // subtract (127-15) << 23
    const uint32_t lsb = (mant >> 13) & 1u;
    mant += 0x0fffu + lsb;
    return static_cast<uint16_t>(sign | (mant >> 13));
  }
  if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to +-0 (2^-25 itself ties to 0)
  // Subnormal f16: value = m * 2^-24 with m in [1, 1023]; shift the full
  // significand (with its implicit bit) into place and round to nearest even.
  const uint32_t exponent = abs >> 23;
  const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24 for exponents in [102, 112]
  uint32_t result = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

MT_HOST_DEVICE inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  // Subnormal: normalise the significand into an f32 normal.
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

// f32 -> bf16 bits: keep the top 16 bits with round to nearest even.
MT_HOST_DEVICE inline uint16_t f32_to_bf16_bits(float value) {
  const uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN: canonical, as the GPU's cvt.rn.bf16.f32
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

MT_HOST_DEVICE MT_INLINE float bf16_bits_to_f32(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Storage types. Arithmetic on them is deliberately not provided: convert to
// float, compute, convert back (that is the "round once on store" rule).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  MT_HOST_DEVICE explicit Half(float f) : bits(f32_to_f16_bits(f)) {}
  MT_HOST_DEVICE operator float() const { return f16_bits_to_f32(bits); }
  MT_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  MT_HOST_DEVICE explicit BFloat16(float f) : bits(f32_to_bf16_bits(f)) {}
  MT_HOST_DEVICE operator float() const { return bf16_bits_to_f32(bits); }
  MT_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace mt
