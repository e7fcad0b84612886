// fp16 / bf16 device types for the SIMT simulator.
//
// On the GPU, kernels use CUDA's __half and __nv_bfloat16 from <cuda_fp16.h>
// and <cuda_bf16.h>. When a .cu file is compiled against the simulator, these
// host stand-ins take their place. They store the same 16 bits and convert
// exactly like the hardware: float -> half/bfloat16 rounds to nearest even,
// overflows to inf, keeps NaN a NaN, and produces subnormals, so FP16 overflow
// and underflow happen in the simulator exactly where they happen on a GPU.
//
// Arithmetic is done in float and rounded once. For + - * / that is the
// correctly rounded result (float's 24-bit significand is wide enough that the
// double rounding is harmless), which is what the GPU's half instructions give.
//
// The types live in mt::simulator so that a library holding both the
// nvcc-built and the simulator-built copy of a kernel never sees two different
// definitions of ::__half; cuda_compat.h brings them into the global namespace
// for kernel code.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "runtime/half.h"

namespace mt::simulator {

// ---- bit-level conversions: runtime/half.h's, the one converter CPU kernels,
// core and the simulator share (round to nearest even, canonical NaN).

inline std::uint16_t float_to_half_bits(float value) { return ::mt::f32_to_f16_bits(value); }
inline float half_bits_to_float(std::uint16_t half) { return ::mt::f16_bits_to_f32(half); }
inline std::uint16_t float_to_bfloat16_bits(float value) { return ::mt::f32_to_bf16_bits(value); }
inline float bfloat16_bits_to_float(std::uint16_t value) { return ::mt::bf16_bits_to_f32(value); }

// ---- the types ---------------------------------------------------------------

// Both types share one shape: 16 raw bits plus float conversions. A tag picks
// the encoding so __half and __nv_bfloat16 stay distinct types.
template <typename Encoding>
struct Float16Storage {
  std::uint16_t bits;

  Float16Storage() = default;
  Float16Storage(float value) : bits(Encoding::from_float(value)) {}  // NOLINT: implicit like CUDA's
  Float16Storage(double value) : Float16Storage(static_cast<float>(value)) {}
  Float16Storage(int value) : Float16Storage(static_cast<float>(value)) {}
  operator float() const { return Encoding::to_float(bits); }  // NOLINT: implicit like CUDA's

  static Float16Storage from_bits(std::uint16_t raw) {
    Float16Storage result{};
    result.bits = raw;
    return result;
  }
  Float16Storage& operator+=(Float16Storage other) { return *this = float(*this) + float(other); }
  Float16Storage& operator-=(Float16Storage other) { return *this = float(*this) - float(other); }
  Float16Storage& operator*=(Float16Storage other) { return *this = float(*this) * float(other); }
  Float16Storage& operator/=(Float16Storage other) { return *this = float(*this) / float(other); }
};

struct HalfEncoding {
  static std::uint16_t from_float(float v) { return float_to_half_bits(v); }
  static float to_float(std::uint16_t b) { return half_bits_to_float(b); }
};
struct BFloat16Encoding {
  static std::uint16_t from_float(float v) { return float_to_bfloat16_bits(v); }
  static float to_float(std::uint16_t b) { return bfloat16_bits_to_float(b); }
};

using half = Float16Storage<HalfEncoding>;
using bfloat16 = Float16Storage<BFloat16Encoding>;

// Each operator rounds its float result once, as the GPU's half instructions do.
template <typename E>
Float16Storage<E> operator+(Float16Storage<E> a, Float16Storage<E> b) { return float(a) + float(b); }
template <typename E>
Float16Storage<E> operator-(Float16Storage<E> a, Float16Storage<E> b) { return float(a) - float(b); }
template <typename E>
Float16Storage<E> operator*(Float16Storage<E> a, Float16Storage<E> b) { return float(a) * float(b); }
template <typename E>
Float16Storage<E> operator/(Float16Storage<E> a, Float16Storage<E> b) { return float(a) / float(b); }
template <typename E>
Float16Storage<E> operator-(Float16Storage<E> a) { return Float16Storage<E>::from_bits(a.bits ^ 0x8000u); }

// Pairs, as held in one 32-bit register (x in the low half).
template <typename Scalar>
struct Pair16 {
  Scalar x, y;
};
using half2 = Pair16<half>;
using bfloat162 = Pair16<bfloat16>;

}  // namespace mt::simulator

// ---- CUDA's names for them (kernel code only sees these) ---------------------
namespace mt::simulator::cuda_names {
using __half = ::mt::simulator::half;
using __nv_bfloat16 = ::mt::simulator::bfloat16;
using __half2 = ::mt::simulator::half2;
using __nv_bfloat162 = ::mt::simulator::bfloat162;

inline __half __float2half(float v) { return __half(v); }
inline __half __float2half_rn(float v) { return __half(v); }
inline float __half2float(__half v) { return float(v); }
inline __nv_bfloat16 __float2bfloat16(float v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) { return __nv_bfloat16(v); }
inline float __bfloat162float(__nv_bfloat16 v) { return float(v); }
inline __half __ushort_as_half(unsigned short bits) { return __half::from_bits(bits); }
inline unsigned short __half_as_ushort(__half v) { return v.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return __nv_bfloat16::from_bits(bits); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.bits; }

inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline float __low2float(__half2 v) { return float(v.x); }
inline float __high2float(__half2 v) { return float(v.y); }
inline float __low2float(__nv_bfloat162 v) { return float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return float(v.y); }

inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hfma(__half a, __half b, __half c) { return __half(std::fma(float(a), float(b), float(c))); }
inline bool __hisnan(__half a) { return std::isnan(float(a)); }
inline bool __hisinf(__half a) { return std::isinf(float(a)); }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
}  // namespace mt::simulator::cuda_names
