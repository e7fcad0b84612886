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

}  // namespace mt::kernels::cpu
