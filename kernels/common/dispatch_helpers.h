// Host-side helpers for the dispatchers of the GEMM and row-wise families
// (kernels/gemm/matmul.h, softmax.h, layer_norm.h, cross_entropy.h): they turn
// Tensors into the raw contiguous buffers the CUDA entry points take. Op
// code only — never included by a .cu file (it needs core/tensor.h).
#pragma once

#include "kernels/common/kernel_dtype.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::kernels::device_buffers {

inline KernelDType kernel_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case kF64: return KernelDType::F64;
    case kF32: return KernelDType::F32;
    case kF16: return KernelDType::F16;
    case kBF16: return KernelDType::BF16;
    default: break;
  }
  fail("{}: the CUDA kernels take f64, f32, f16 or bf16 tensors, got {}", op, dtype);
}

// f32 for f32/f16/bf16 data, f64 for f64: the dtype of row statistics.
inline DType accumulator_dtype(DType dtype) { return dtype == kF64 ? kF64 : kF32; }

// `t` itself when it already is contiguous `dtype`, else a contiguous copy on its device.
inline Tensor contiguous_as(const Tensor& t, DType dtype) {
  if (!t.defined() || (t.is_contiguous() && t.dtype() == dtype)) return t;
  Tensor c = empty(t.sizes(), dtype, t.device());
  kernels::copy(t, c);
  return c;
}

// Where a kernel writes `out`: out itself when contiguous `dtype`, else a scratch tensor.
inline Tensor output_buffer(const Tensor& out, DType dtype) {
  if (!out.defined() || (out.is_contiguous() && out.dtype() == dtype)) return out;
  return empty(out.sizes(), dtype, out.device());
}

// Moves a scratch result into `out` (converting dtype/layout) and bumps its version.
inline void finish_output(const Tensor& buffer, const Tensor& out) {
  if (!out.defined()) return;
  if (!buffer.is_same(out)) kernels::copy(buffer, out);
  mark_written(out);
}

inline const void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
inline void* mutable_data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace mt::kernels::device_buffers
