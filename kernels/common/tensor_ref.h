// How op code hands a tensor to a CUDA kernel entry point.
//
// Entry points take only plain host types (kernel_api.h), so a Tensor is
// described by a TensorRef: the address of its first element, its dtype and
// its geometry. This header is included by nvcc, so it must not include
// core/tensor.h; kernels/dispatch.h converts a Tensor into a TensorRef.
#pragma once

#include <cstdint>

namespace mt::kernels {

inline constexpr int kMaxDims = 8;  // more dims are coalesced first, or rejected

// The same order as mt::DType (checked in kernels/dispatch.h).
enum class DTypeCode : int32_t { F64, F32, F16, BF16, I64, I32, U8, Bool };

struct TensorRef {
  void* data = nullptr;  // element 0 of the view (storage + offset)
  DTypeCode dtype = DTypeCode::F32;
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

inline int element_bytes(DTypeCode t) {
  switch (t) {
    case DTypeCode::F64:
    case DTypeCode::I64: return 8;
    case DTypeCode::F32:
    case DTypeCode::I32: return 4;
    case DTypeCode::F16:
    case DTypeCode::BF16: return 2;
    case DTypeCode::U8:
    case DTypeCode::Bool: return 1;
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

// f64 and the integer types compute in double (as on the CPU); the rest in float.
inline bool computes_in_double(DTypeCode t) {
  return t == DTypeCode::F64 || t == DTypeCode::I64 || t == DTypeCode::I32;
}

}  // namespace mt::kernels
