// The machinery every elementwise-shaped kernel shares (elementwise/cuda.cu,
// dropout/cuda.cu, ...): reading and writing any dtype as the compute type, a
// strided N-operand iterator with coalesced dims, and the grid-stride loop
// with a 128-bit vector path.
//
// Include after runtime/launch.h, from .cu files only.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/fp8.h"
#include "runtime/half.h"
#include "runtime/launch.h"
#include "kernels/common/tensor_ref.h"

#if defined(__CUDACC__)
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

namespace mt::MT_KERNEL_NS {

using kernels::kMaxDims;
using kernels::TensorRef;

// ---- 16-bit floats: the hardware conversions on the GPU, the bit-exact
// software ones (runtime/half.h, identical results) in the simulator.

__device__ __forceinline__ float f16_to_float(std::uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return f16_bits_to_f32(bits);
#endif
}
__device__ __forceinline__ float bf16_to_float(std::uint16_t bits) { return bf16_bits_to_f32(bits); }
__device__ __forceinline__ std::uint16_t float_to_f16(float v) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(v));
#else
  return f32_to_f16_bits(v);
#endif
}
__device__ __forceinline__ std::uint16_t float_to_bf16(float v) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
  return f32_to_bf16_bits(v);
#endif
}

// Element `index` of `base` (dtype t) as the compute type T (float or double).
template <typename T>
__device__ __forceinline__ T load_as(const void* base, DType t, std::int64_t index) {
  switch (t) {
    case DType::F64: return static_cast<T>(static_cast<const double*>(base)[index]);
    case DType::F32: return static_cast<T>(static_cast<const float*>(base)[index]);
    case DType::F16: return static_cast<T>(f16_to_float(static_cast<const std::uint16_t*>(base)[index]));
    case DType::BF16: return static_cast<T>(bf16_to_float(static_cast<const std::uint16_t*>(base)[index]));
    case DType::I64: return static_cast<T>(static_cast<const std::int64_t*>(base)[index]);
    case DType::I32: return static_cast<T>(static_cast<const std::int32_t*>(base)[index]);
    case DType::U8: return static_cast<T>(static_cast<const std::uint8_t*>(base)[index]);
    case DType::I8: return static_cast<T>(static_cast<const std::int8_t*>(base)[index]);
    case DType::Bool: return static_cast<const std::uint8_t*>(base)[index] != 0 ? T(1) : T(0);
    case DType::F8E4M3: return static_cast<T>(e4m3_bits_to_f32(static_cast<const std::uint8_t*>(base)[index]));
    case DType::F8E5M2: return static_cast<T>(e5m2_bits_to_f32(static_cast<const std::uint8_t*>(base)[index]));
  }
  return T(0);
}

// Rounds v once into dtype t (f16/bf16: nearest even, via float like the CPU).
template <typename T>
__device__ __forceinline__ void store_as(void* base, DType t, std::int64_t index, T v) {
  switch (t) {
    case DType::F64: static_cast<double*>(base)[index] = static_cast<double>(v); return;
    case DType::F32: static_cast<float*>(base)[index] = static_cast<float>(v); return;
    case DType::F16: static_cast<std::uint16_t*>(base)[index] = float_to_f16(static_cast<float>(v)); return;
    case DType::BF16: static_cast<std::uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(v)); return;
    case DType::I64: static_cast<std::int64_t*>(base)[index] = static_cast<std::int64_t>(v); return;
    // Narrow integers go through int64 and wrap (-5.0 -> u8 251), like the CPU:
    // a direct conversion would saturate on the GPU and is undefined in C++.
    case DType::I32: static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(static_cast<std::int64_t>(v)); return;
    case DType::U8: static_cast<std::uint8_t*>(base)[index] = static_cast<std::uint8_t>(static_cast<std::int64_t>(v)); return;
    case DType::I8: static_cast<std::int8_t*>(base)[index] = static_cast<std::int8_t>(static_cast<std::int64_t>(v)); return;
    case DType::Bool: static_cast<std::uint8_t*>(base)[index] = v != T(0) ? 1 : 0; return;
    // FP8 with the GPU's satfinite rule (runtime/fp8.h), the same code on every device.
    case DType::F8E4M3: static_cast<std::uint8_t*>(base)[index] = f32_to_e4m3_bits(static_cast<float>(v)); return;
    case DType::F8E5M2: static_cast<std::uint8_t*>(base)[index] = f32_to_e5m2_bits(static_cast<float>(v)); return;
  }
}

// ---- the strided iterator ------------------------------------------------------------

// N operands of one shape (operand 0 is the output), passed by value as a
// kernel argument. Dims that are contiguous in every operand are merged on
// the host, so a plain contiguous op is 1-D and a broadcast bias add is 2-D.
template <int N>
struct StridedIter {
  std::int64_t numel = 0;
  std::int32_t ndim = 0;
  std::int32_t pack = 0;  // > 0: every operand is contiguous and 16-byte aligned, `pack` elements per 16 bytes
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[N][kMaxDims] = {};
  void* data[N] = {};
  DType dtype[N] = {};
};

// Builds the iterator over operands that all have operands[0]'s shape
// (inputs already broadcast with stride-0 dims).
template <int N>
StridedIter<N> make_strided_iter(const TensorRef* const (&operands)[N]) {
  StridedIter<N> it;
  const TensorRef& out = *operands[0];
  it.numel = out.numel;
  for (int k = 0; k < N; ++k) {
    it.data[k] = operands[k]->data;
    it.dtype[k] = operands[k]->dtype;
  }
  // Keep the dims of size > 1, then merge neighbours that are contiguous in every operand.
  int nd = 0;
  for (int d = 0; d < out.ndim; ++d) {
    if (out.sizes[d] == 1) continue;
    it.sizes[nd] = out.sizes[d];
    for (int k = 0; k < N; ++k) it.strides[k][nd] = operands[k]->strides[d];
    ++nd;
  }
  int merged = 0;
  for (int d = 0; d < nd; ++d) {
    bool can_merge = merged > 0;
    for (int k = 0; k < N && can_merge; ++k) {
      can_merge = it.strides[k][merged - 1] == it.strides[k][d] * it.sizes[d];
    }
    if (can_merge) {
      it.sizes[merged - 1] *= it.sizes[d];
      for (int k = 0; k < N; ++k) it.strides[k][merged - 1] = it.strides[k][d];
    } else {
      it.sizes[merged] = it.sizes[d];
      for (int k = 0; k < N; ++k) it.strides[k][merged] = it.strides[k][d];
      ++merged;
    }
  }
  it.ndim = merged;
  // The 128-bit path: 1-D, unit stride everywhere, one element size (2 or 4 bytes), aligned.
  const int size0 = kernels::element_bytes(out.dtype);
  bool vector = (merged == 1 && (size0 == 2 || size0 == 4));
  for (int k = 0; k < N && vector; ++k) {
    vector = it.strides[k][0] == 1 && kernels::element_bytes(it.dtype[k]) == size0 &&
             reinterpret_cast<std::uintptr_t>(it.data[k]) % 16 == 0;
  }
  it.pack = vector ? 16 / size0 : 0;
  return it;
}

// Element offsets of linear index i (row-major over the shape) in each operand.
template <int N>
__device__ __forceinline__ void operand_offsets(const StridedIter<N>& it, std::int64_t i, std::int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    const std::int64_t coord = i % it.sizes[d];
    i /= it.sizes[d];
    for (int k = 0; k < N; ++k) off[k] += coord * it.strides[k][d];
  }
}

// Element e of a 16-byte pack holding `Pack` elements of dtype t.
template <typename T, int Pack>
__device__ __forceinline__ T unpack(const unsigned (&words)[4], int e, DType t) {
  if constexpr (Pack == 4) {
    return t == DType::F32 ? static_cast<T>(__uint_as_float(words[e]))
                               : static_cast<T>(static_cast<std::int32_t>(words[e]));
  } else {
    const auto bits = static_cast<std::uint16_t>(words[e / 2] >> (16 * (e % 2)));
    return static_cast<T>(t == DType::F16 ? f16_to_float(bits) : bf16_to_float(bits));
  }
}

template <typename T, int Pack>
__device__ __forceinline__ void pack_into(unsigned (&words)[4], int e, DType t, T v) {
  if constexpr (Pack == 4) {
    words[e] = t == DType::F32 ? __float_as_uint(static_cast<float>(v))
                                   : static_cast<unsigned>(static_cast<std::int32_t>(v));
  } else {
    const std::uint16_t bits =
        t == DType::F16 ? float_to_f16(static_cast<float>(v)) : float_to_bf16(static_cast<float>(v));
    const int shift = 16 * (e % 2);
    words[e / 2] = (words[e / 2] & ~(0xffffu << shift)) | (static_cast<unsigned>(bits) << shift);
  }
}

// One thread handles 16 bytes of every operand: one 128-bit load per input,
// one 128-bit store, Pack elements computed in between.
template <typename T, int N, int Pack, typename Fn>
__device__ __forceinline__ void vector_loop(const StridedIter<N>& it, Fn& fn, std::int64_t first, std::int64_t step) {
  const std::int64_t packs = it.numel / Pack;
  for (std::int64_t p = first; p < packs; p += step) {
    unsigned in_words[N][4];
    for (int k = 1; k < N; ++k) {
      const uint4 raw = reinterpret_cast<const uint4*>(it.data[k])[p];
      std::memcpy(in_words[k], &raw, 16);
    }
    unsigned out_words[4] = {0, 0, 0, 0};
MT_UNROLL
    for (int e = 0; e < Pack; ++e) {
      T in[N - 1];
      for (int k = 1; k < N; ++k) in[k - 1] = unpack<T, Pack>(in_words[k], e, it.dtype[k]);
      pack_into<T, Pack>(out_words, e, it.dtype[0], fn(in));
    }
    uint4 raw;
    std::memcpy(&raw, out_words, 16);
    reinterpret_cast<uint4*>(it.data[0])[p] = raw;
  }
  for (std::int64_t i = (packs * Pack) + first; i < it.numel; i += step) {  // the ragged tail
    T in[N - 1];
    for (int k = 1; k < N; ++k) in[k - 1] = load_as<T>(it.data[k], it.dtype[k], i);
    store_as<T>(it.data[0], it.dtype[0], i, fn(in));
  }
}

// out = fn(in_1, ..., in_{N-1}) over the iterator, grid-stride. fn takes `const T (&)[N - 1]`.
template <typename T, int N, typename Fn>
__device__ __forceinline__ void elementwise_loop(const StridedIter<N>& it, Fn fn) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  // The vector paths exist for float compute only (f32/f16/bf16 tensors):
  // f64 and integer math is rare on the GPU and not worth the code size.
  if constexpr (std::is_same_v<T, float>) {
    if (it.pack == 4) return vector_loop<T, N, 4>(it, fn, first, step);
    if (it.pack == 8) return vector_loop<T, N, 8>(it, fn, first, step);
  }
  for (std::int64_t i = first; i < it.numel; i += step) {
    std::int64_t off[N];
    operand_offsets(it, i, off);
    T in[N - 1];
    for (int k = 1; k < N; ++k) in[k - 1] = load_as<T>(it.data[k], it.dtype[k], off[k]);
    store_as<T>(it.data[0], it.dtype[0], off[0], fn(in));
  }
}

inline constexpr int kElementwiseThreads = 256;

// Enough blocks to cover the work once, capped: the loops are grid-stride.
inline dim3 elementwise_grid(std::int64_t work_items) {
  const std::int64_t blocks = (work_items + kElementwiseThreads - 1) / kElementwiseThreads;
  return dim3(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks)));
}

template <int N>
std::int64_t work_items(const StridedIter<N>& it) {
  return it.pack > 0 ? it.numel / it.pack + it.pack : it.numel;
}

}  // namespace mt::MT_KERNEL_NS
