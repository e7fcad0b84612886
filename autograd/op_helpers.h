// Small helpers shared by the op files (not part of the public API).
#pragma once

#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/conv/api.h"
#include "kernels/gemm/api.h"

namespace mt::autograd {

void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& t);
void check_index_tensor(const char* op, const Tensor& index);

// A stride-0 view of `t` broadcast to `shape` (no autograd; for kernel inputs).
Tensor broadcast_view(const Tensor& t, const Shape& shape);

// Sorted, unique, wrapped dims; an empty list means every dim.
Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op);

// A convolution's geometry (output size included) from its input [N, C, H,
// W] and weight shape [O, C / groups, kH, kW], every size checked: what the
// float conv2d and the INT8 one both run on.
kernels::ConvShape conv2d_geometry(const Tensor& x, const Shape& weight_sizes, Size2 stride, Size2 padding,
                                   Size2 dilation, int64_t groups);

// The GEMM epilogue's form of a Linear's fused activation.
inline kernels::GemmActivation gemm_activation(LinearActivation activation) {
  switch (activation) {
    case LinearActivation::None: return kernels::GemmActivation::None;
    case LinearActivation::Relu: return kernels::GemmActivation::Relu;
    case LinearActivation::Gelu: return kernels::GemmActivation::GeluErf;
    case LinearActivation::GeluTanh: return kernels::GemmActivation::GeluTanh;
  }
  return kernels::GemmActivation::None;
}

// The dtype an op on x computes its floating result in (integers become f32).
inline DType floating_result_type(DType t) { return is_floating(t) ? t : kF32; }

// The dtype of a binary op's result, by PyTorch's rule: a 0-dim operand
// takes part only when its category (bool < integer < floating) is above the
// other, dimensioned operand's. f32[4] + f64[] is f32, f16[4] * f32[] is f16,
// i64[4] + f64[] is f64; two dimensioned (or two 0-dim) operands promote as usual.
DType binary_result_type(const Tensor& a, const Tensor& b);

// A 0-dim tensor holding a scalar operand in the compute type of `like`
// (f32 for f32/f16/bf16, f64 otherwise), so an f16 op never sees a pre-rounded scalar.
Tensor scalar_operand(double value, const Tensor& like);

// A tensor seen along one dim, for the kernels that work on rows (cumsum,
// sort): `rows` is x without history, `dim` swapped with the last dim and
// made a contiguous [rows, size(dim)] (a 0-dim x counts as [1]).
struct RowsAlongDim {
  Tensor rows;
  int64_t dim = 0;     // wrapped
  Shape moved_shape;   // x's shape with `dim` and the last dim swapped
  bool scalar = false; // x was 0-dim
  // A [rows, n] result of a row kernel in x's layout, with n along `dim`.
  Tensor restore(const Tensor& row_result) const;
};
RowsAlongDim rows_along_dim(const Tensor& x, int64_t dim, const char* op);

}  // namespace mt::autograd
