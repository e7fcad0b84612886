// Eight f32 lanes to and from bf16 with AVX2, for the CPU kernels whose
// loops GCC leaves scalar (it judges the rounding's NaN select not worth
// vectorising). The same results as runtime/half.h's scalar conversions.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

#include "runtime/half.h"

namespace mt::kernels::cpu {

// Eight consecutive bf16 values as f32 lanes: exact (a bf16's bits are the
// top half of its f32's).
inline __m256 widen_bf16x8(const BFloat16* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// The bf16 bits of eight f32 lanes, each in the low half of its 32-bit
// lane: f32_to_bf16_bits's rounding (to nearest, ties to even) and its
// canonical NaN 0x7fff.
inline __m256i bf16_bits_x8(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));  // both non-negative
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fff), nan);
}

// Eight f32 lanes rounded to bf16 (as bf16_bits_x8) and stored at dst.
inline void store_bf16x8(__m256 v, BFloat16* dst) {
  const __m256i bits = bf16_bits_x8(v);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0b1000);  // lanes 0-3, 4-7
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

// Eight f32 values rounded to bf16 and stored at dst.
inline void narrow_bf16x8(const float* src, BFloat16* dst) { store_bf16x8(_mm256_loadu_ps(src), dst); }

}  // namespace mt::kernels::cpu
#endif

#include <cstdint>

#include "runtime/half.h"

namespace mt::kernels::cpu {

// dst[0, n) = src[0, n) widened (exact), eight lanes at a time where the CPU
// has AVX2, the tail one by one.
inline void widen_bf16_run(const BFloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen_bf16x8(src + i));
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// dst[0, n) = src[0, n) rounded to bf16 as BFloat16's constructor rounds,
// eight lanes at a time where the CPU has AVX2 (GCC leaves the scalar loop
// scalar), the tail one by one.
inline void narrow_bf16_run(const float* src, BFloat16* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) narrow_bf16x8(src + i, dst + i);
#endif
  for (; i < n; ++i) dst[i] = BFloat16(src[i]);
}

}  // namespace mt::kernels::cpu
