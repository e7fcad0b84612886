// mixtape's element types as one plain enum that every layer and both
// compilers share: core's Tensor, the CPU kernels, and the CUDA kernels'
// entry points (kernels/common/tensor_ref.h) all name a dtype with it.
// core/dtype.h adds sizes, names and conversions.
#pragma once

#include <cstdint>

namespace mt {

enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, U8, Bool };

inline constexpr DType kF64 = DType::F64;
inline constexpr DType kF32 = DType::F32;
inline constexpr DType kF16 = DType::F16;
inline constexpr DType kBF16 = DType::BF16;
inline constexpr DType kI64 = DType::I64;
inline constexpr DType kI32 = DType::I32;
inline constexpr DType kU8 = DType::U8;
inline constexpr DType kBool = DType::Bool;

}  // namespace mt
