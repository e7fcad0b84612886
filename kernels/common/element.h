// Device-side view of mixtape's floating element types (shared by the CUDA kernels).
//
// Each tag names how an element is stored and in which type it is computed:
// f16 and bf16 are stored as 16-bit bit patterns and widened to float, f32
// stays float, f64 stays double. Kernels load with to_acc(), do all their
// arithmetic in Acc (that is the "FP32 accumulation" of every kernel file),
// and round exactly once on store with from_acc().
#pragma once

#include <cstdint>

#include "runtime/cuda_compat.h"
#include "kernels/common/kernel_dtype.h"

// Fully unroll a loop with a compile-time trip count, so small arrays indexed by
// its counter (accumulators, fragments) stay in registers instead of local
// memory. Nothing to unroll in the simulator (and GCC would warn).
#if MT_SIM_BUILD
#define MT_UNROLL
#else
#define MT_UNROLL _Pragma("unroll")
#endif

namespace mt::MT_KERNEL_NS::element {

struct F16 {
  using Storage = std::uint16_t;
  using Acc = float;
  static constexpr bool kIs16Bit = true;
  __device__ __forceinline__ static Acc to_acc(Storage v) { return __half2float(__ushort_as_half(v)); }
  __device__ __forceinline__ static Storage from_acc(Acc v) { return __half_as_ushort(__float2half_rn(v)); }
};

struct BF16 {
  using Storage = std::uint16_t;
  using Acc = float;
  static constexpr bool kIs16Bit = true;
  __device__ __forceinline__ static Acc to_acc(Storage v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
  __device__ __forceinline__ static Storage from_acc(Acc v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};

struct F32 {
  using Storage = float;
  using Acc = float;
  static constexpr bool kIs16Bit = false;
  __device__ __forceinline__ static Acc to_acc(Storage v) { return v; }
  __device__ __forceinline__ static Storage from_acc(Acc v) { return v; }
};

struct F64 {
  using Storage = double;
  using Acc = double;
  static constexpr bool kIs16Bit = false;
  __device__ __forceinline__ static Acc to_acc(Storage v) { return v; }
  __device__ __forceinline__ static Storage from_acc(Acc v) { return v; }
};

// Calls body(Tag{}) with the tag of `dtype`; host side, for entry points.
template <typename Body>
void visit(kernels::KernelDType dtype, Body&& body) {
  switch (dtype) {
    case kernels::KernelDType::F64: body(F64{}); return;
    case kernels::KernelDType::F32: body(F32{}); return;
    case kernels::KernelDType::F16: body(F16{}); return;
    case kernels::KernelDType::BF16: body(BF16{}); return;
  }
}

}  // namespace mt::MT_KERNEL_NS::element
