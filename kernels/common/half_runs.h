// Runs of 16-bit floats (bf16 or f16) to and from f32, by overload: the
// kernels that read and write either half type a block at a time through
// f32 on the stack (elementwise, batch norm, pooling, casts) name one
// function for both. Eight lanes at a time (bf16x8.h, f16x8.h), the same
// bits as the scalar conversions of runtime/half.h.
#pragma once

#include <cstdint>

#include "kernels/common/bf16x8.h"
#include "kernels/common/f16x8.h"

namespace mt::kernels::cpu {

inline void widen_run(const BFloat16* src, float* dst, int64_t n) { widen_bf16_run(src, dst, n); }
inline void widen_run(const Half* src, float* dst, int64_t n) { widen_f16_run(src, dst, n); }
inline void narrow_run(const float* src, BFloat16* dst, int64_t n) { narrow_bf16_run(src, dst, n); }
inline void narrow_run(const float* src, Half* dst, int64_t n) { narrow_f16_run(src, dst, n); }

// Eight values of a row stored as f32, bf16 or f16, as f32 lanes (exact),
// and f32 lanes stored back, each rounded once as the scalar conversions
// round: for the kernels that read a row in its own dtype and compute in
// f32 registers, with no f32 copy of the row in between.
// MT_F32X8_LANES says whether they exist (AVX2 and F16C: x86-64-v3 has both).
#if defined(__F16C__) && defined(__AVX2__)
#define MT_F32X8_LANES 1
inline __m256 load_f32x8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_f32x8(const BFloat16* p) { return widen_bf16x8(p); }
inline __m256 load_f32x8(const Half* p) { return widen_f16x8(p); }
inline void store_f32x8(__m256 v, float* p) { _mm256_storeu_ps(p, v); }
inline void store_f32x8(__m256 v, BFloat16* p) { store_bf16x8(v, p); }
inline void store_f32x8(__m256 v, Half* p) { store_f16x8(v, p); }
#else
#define MT_F32X8_LANES 0
#endif

}  // namespace mt::kernels::cpu
