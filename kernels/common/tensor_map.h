// Tensor maps: how Hopper's TMA (cp.async.bulk.tensor) sees a global tensor.
//
// A tensor map names a tensor in global memory (address, up to 3 dimensions
// here, innermost first, strides) and the box (tile) one copy moves, plus how
// the box is swizzled into shared memory. On a GPU it is the driver's opaque
// 128-byte CUtensorMap, made on the host by cuTensorMapEncodeTiled and passed
// to the kernel as a `const __grid_constant__` parameter; in the simulator
// the same 128 bytes hold the simulator's own encoding
// (mt::simulator::TensorMapEncoding). Plain C++: host code includes it.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::kernels {

// A CUtensorMap's size and alignment, contents opaque.
struct alignas(64) TensorMap {
  std::uint64_t opaque[16];
};

struct TensorMapSpec {
  KernelDType dtype = KernelDType::F16;
  const void* address = nullptr;      // 16-byte aligned
  int rank = 2;                       // 1..3
  std::uint64_t dims[3] = {1, 1, 1};  // elements per dimension, innermost first
  std::uint64_t strides[3] = {1, 0,
                              0};  // elements between consecutive indices; strides[0] = 1, the rest x size % 16 B == 0
  std::uint32_t box[3] = {1, 1, 1};  // the tile one copy moves, innermost first (each <= 256)
  std::uint32_t swizzle_bytes = 0;   // 0, 32, 64 or 128 (then box[0] x element size == swizzle_bytes)
  bool bytes = false;                // 8-bit elements (FP8, INT8) whatever `dtype` says: copied as raw bytes
};

}  // namespace mt::kernels

// Encodes `spec` into `map`; throws std::invalid_argument when the driver
// (or, in the simulator, the simulator) refuses it.
MT_CUDA_KERNEL_API(void encode_tensor_map(mt::kernels::TensorMap& map, const mt::kernels::TensorMapSpec& spec))
