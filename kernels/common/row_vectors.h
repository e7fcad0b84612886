// 16-byte vector loads and stores of a row's elements (CUDA kernels
// only): the v3 rungs of the softmax and layer_norm ladders read and
// write 8 f16/bf16 or 4 f32 values per instruction through these. The
// caller makes sure the address is 16-byte aligned.
#pragma once

#include <cstring>

#include "runtime/cuda_compat.h"

namespace mt::MT_KERNEL_NS::rowwise {

// One 16-byte vector of a row: 16 / sizeof(Storage) elements.
template <typename E>
struct Vector {
  static constexpr int kElements = 16 / static_cast<int>(sizeof(typename E::Storage));
  typename E::Storage values[kElements];
};

template <typename E>
__device__ __forceinline__ Vector<E> load_vector(const typename E::Storage* at) {
  const uint4 bits = *reinterpret_cast<const uint4*>(at);
  Vector<E> v;
  static_assert(sizeof(v.values) == sizeof(bits), "a vector is 16 bytes");
  memcpy(v.values, &bits, sizeof(bits));
  return v;
}

template <typename E>
__device__ __forceinline__ void store_vector(typename E::Storage* at, const Vector<E>& v) {
  uint4 bits;
  memcpy(&bits, v.values, sizeof(bits));
  *reinterpret_cast<uint4*>(at) = bits;
}

}  // namespace mt::MT_KERNEL_NS::rowwise
