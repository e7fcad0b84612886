// Element types. Device and dtype are first-class in every tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/half.h"

namespace mt {

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::U8: case DType::I8: case DType::Bool: case DType::F8E4M3: case DType::F8E5M2: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "f64";
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I64: return "i64";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
    case DType::I8: return "i8";
    case DType::Bool: return "bool";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
  }
  return "?";
}

// FP8 is floating (as in PyTorch) but holds scaled data: only casts, copies,
// views and the FP8 kernels take it (is_fp8). is_low_precision means the
// 16-bit autocast types.
constexpr bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }
constexpr bool is_floating(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16 || is_fp8(t);
}
constexpr bool is_low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }
// The floating types ops compute in and parameters may have: not FP8.
constexpr bool is_compute_float(DType t) { return is_floating(t) && !is_fp8(t); }

// The type of the result of a binary op on two tensors (PyTorch's rules for
// tensor-tensor promotion): floats beat integers, wider beats narrower, and
// f16 with bf16 meets at f32 because neither holds the other.
DType promote_types(DType a, DType b);

// The C++ type a dtype is stored as, and back.
template <DType T> struct StorageOf;
template <> struct StorageOf<DType::F64> { using type = double; };
template <> struct StorageOf<DType::F32> { using type = float; };
template <> struct StorageOf<DType::F16> { using type = Half; };
template <> struct StorageOf<DType::BF16> { using type = BFloat16; };
template <> struct StorageOf<DType::I64> { using type = int64_t; };
template <> struct StorageOf<DType::I32> { using type = int32_t; };
template <> struct StorageOf<DType::U8> { using type = uint8_t; };
template <> struct StorageOf<DType::I8> { using type = int8_t; };
template <> struct StorageOf<DType::Bool> { using type = bool; };
template <> struct StorageOf<DType::F8E4M3> { using type = Float8E4M3; };
template <> struct StorageOf<DType::F8E5M2> { using type = Float8E5M2; };

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<Half>() { return DType::F16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BF16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<Float8E4M3>() { return DType::F8E4M3; }
template <> constexpr DType dtype_of<Float8E5M2>() { return DType::F8E5M2; }

// The storage-only float types (16- and 8-bit): no arithmetic, converted
// through float in both directions.
template <typename T>
inline constexpr bool kIsNarrowFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> ||
                                       std::is_same_v<T, Float8E4M3> || std::is_same_v<T, Float8E5M2>;

// Calls fn(StorageType{}) with a value-initialised object of the dtype's C++ type.
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F64: return fn(double{});
    case DType::F32: return fn(float{});
    case DType::F16: return fn(Half{});
    case DType::BF16: return fn(BFloat16{});
    case DType::I64: return fn(int64_t{});
    case DType::I32: return fn(int32_t{});
    case DType::U8: return fn(uint8_t{});
    case DType::I8: return fn(int8_t{});
    case DType::Bool: return fn(bool{});
    case DType::F8E4M3: return fn(Float8E4M3{});
    case DType::F8E5M2: return fn(Float8E5M2{});
  }
  fail("visit_dtype: invalid dtype {}", static_cast<int>(t));
}

}  // namespace mt

template <>
struct fmt::formatter<mt::DType> : fmt::formatter<std::string_view> {
  auto format(mt::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mt::dtype_name(t), ctx);
  }
};
