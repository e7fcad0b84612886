// mixtape's element types as one plain enum that every layer and both
// compilers share: core's Tensor, the CPU kernels, and the CUDA kernels'
// entry points (kernels/common/tensor_ref.h) all name a dtype with it.
// core/dtype.h adds sizes, names and conversions.
#pragma once

#include <cstdint>

namespace mt {

// Later types come last so the earlier values keep their numbers (saved
// files and the kernels' tables name them by number). F8E4M3/F8E5M2 hold
// scaled data (runtime/fp8.h; kernels/fp8/): casts, copies and views take
// them, arithmetic ops refuse them. I8 is a signed byte: INT8 inference's
// quantized weights and activations (kernels/quantize/), an integer to
// every other op.
enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, U8, Bool, F8E4M3, F8E5M2, I8 };

inline constexpr DType kF64 = DType::F64;
inline constexpr DType kF32 = DType::F32;
inline constexpr DType kF16 = DType::F16;
inline constexpr DType kBF16 = DType::BF16;
inline constexpr DType kI64 = DType::I64;
inline constexpr DType kI32 = DType::I32;
inline constexpr DType kU8 = DType::U8;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kF8E4M3 = DType::F8E4M3;
inline constexpr DType kF8E5M2 = DType::F8E5M2;
inline constexpr DType kI8 = DType::I8;

}  // namespace mt
