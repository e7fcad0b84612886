// Eight f32 lanes to and from f16 with F16C (part of x86-64-v3), for the
// CPU's f16 conversions: runtime/half.h's scalar ones branch on subnormals
// and NaN, GCC leaves them scalar, and under f16 autocast they were 64% of
// a cnn training step. The same bits as the scalar functions: F16C rounds
// to nearest even as they do; only NaNs need mending (below).
#pragma once

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>

#include "runtime/half.h"

namespace mt::kernels::cpu {

// Eight f16 values as f32 lanes: exact. vcvtph2ps sets a NaN's quiet bit;
// f16_bits_to_f32 keeps the payload as it is, so NaN lanes are rebuilt
// from their bits (sign, all-ones exponent, the ten payload bits moved up).
inline __m256 widen_f16x8(const Half* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i h = _mm256_cvtepu16_epi32(bits);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
  const __m256i payload = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff)), 13);
  const __m256i kept_nan = _mm256_or_si256(_mm256_or_si256(sign, payload), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_ps(_mm256_cvtph_ps(bits), _mm256_castsi256_ps(kept_nan), _mm256_castsi256_ps(nan));
}

// Eight f32 lanes rounded to f16 (to nearest, ties to even; 65520 and up
// to inf; subnormals) and stored at dst. vcvtps2ph keeps part of a NaN's
// payload; f32_to_f16_bits writes the canonical 0x7fff, as the GPU does.
inline void store_f16x8(__m256 v, Half* dst) {
  const __m128i rounded = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
  const __m128i bits = _mm_blendv_epi8(rounded, _mm_set1_epi16(0x7fff), nan16);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), bits);
}

// Eight f32 values rounded to f16 and stored at dst.
inline void narrow_f16x8(const float* src, Half* dst) { store_f16x8(_mm256_loadu_ps(src), dst); }

}  // namespace mt::kernels::cpu
#endif

#include <cstdint>

#include "runtime/half.h"

namespace mt::kernels::cpu {

// dst[0, n) = src[0, n) widened (exact), eight lanes at a time where the CPU
// has F16C, the tail one by one.
inline void widen_f16_run(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen_f16x8(src + i));
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// dst[0, n) = src[0, n) rounded to f16 as Half's constructor rounds, eight
// lanes at a time where the CPU has F16C, the tail one by one.
inline void narrow_f16_run(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  for (; i + 8 <= n; i += 8) narrow_f16x8(src + i, dst + i);
#endif
  for (; i < n; ++i) dst[i] = Half(src[i]);
}

}  // namespace mt::kernels::cpu
