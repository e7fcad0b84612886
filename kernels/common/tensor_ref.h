// How op code hands a tensor to a CUDA kernel entry point.
//
// Entry points take only plain host types (kernel_api.h), so a Tensor is
// described by a TensorRef: the address of its first element, its dtype and
// its geometry. This header is included by nvcc, so it must not include
// core/tensor.h; kernels/dispatch.h converts a Tensor into a TensorRef.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace mt::kernels {

inline constexpr int kMaxDims = 8;  // more dims are coalesced first, or rejected

struct TensorRef {
  void* data = nullptr;  // element 0 of the view (storage + offset)
  DType dtype = DType::F32;
  int32_t ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
  bool contiguous() const {
    int64_t expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (sizes[d] == 1) continue;
      if (strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

inline int element_bytes(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::U8:
    case DType::I8:
    case DType::Bool:
    case DType::F8E4M3:
    case DType::F8E5M2: return 1;
  }
  return 0;
}

// The bytes a kernel must move for `t` at least: each distinct element once
// (a broadcast dim, stride 0, is read once). For the profile's GB/s.
inline double distinct_bytes(const TensorRef& t) {
  if (t.data == nullptr) return 0;
  double elements = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.strides[d] != 0) elements *= static_cast<double>(t.sizes[d]);
  }
  return elements * element_bytes(t.dtype);
}

// f64 and the integer types compute in double (exact to 2^53), on the CPU
// and in the CUDA kernels; the rest in float.
inline bool computes_in_double(DType t) {
  return t == DType::F64 || t == DType::I64 || t == DType::I32;
}

}  // namespace mt::kernels
