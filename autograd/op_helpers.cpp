#include "autograd/op_helpers.h"

#include <algorithm>

namespace mt {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast together (dim {}: {} vs {})", op,
             shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace autograd {

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.device() == b.device(), "{}: expected all tensors on the same device, got {} ({}) and {} ({})", op,
           a.device(), a.shape_string(), b.device(), b.shape_string());
}

void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), "{}: expected a floating-point tensor, got {} with shape {}", op, t.dtype(),
           t.shape_string());
}

void check_index_tensor(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == kI64 || index.dtype() == kI32,
           "{}: indices must be an integer tensor (i64), got {} with shape {}", op, index.dtype(),
           index.shape_string());
}

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const size_t lead = shape.size() - t.sizes().size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < t.sizes().size(); ++i) {
    strides[lead + i] = t.sizes()[i] == 1 && shape[lead + i] != 1 ? 0 : t.strides()[i];
  }
  return make_view(t, shape, strides, t.offset());
}

Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  MT_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: dim {} appears more than once in {}", op,
           *std::adjacent_find(out.begin(), out.end()), shape_str(dims));
  if (ndim == 0) out.clear();  // a 0-dim tensor has nothing to reduce over
  return out;
}

Tensor scalar_operand(double value, const Tensor& like) {
  return scalar_tensor(value, is_low_precision(like.dtype()) || like.dtype() == kF32 ? kF32 : kF64, like.device());
}

namespace {
int category(DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; }
}  // namespace

DType binary_result_type(const Tensor& a, const Tensor& b) {
  const bool a_scalar = a.dim() == 0, b_scalar = b.dim() == 0;
  if (a_scalar == b_scalar) return promote_types(a.dtype(), b.dtype());
  const DType dimensioned = a_scalar ? b.dtype() : a.dtype(), scalar = a_scalar ? a.dtype() : b.dtype();
  return category(scalar) > category(dimensioned) ? promote_types(dimensioned, scalar) : dimensioned;
}

RowsAlongDim rows_along_dim(const Tensor& x_in, int64_t dim, const char* op) {
  RowsAlongDim r;
  r.scalar = x_in.dim() == 0;
  const Tensor x = r.scalar ? x_in.detach().reshape({1}) : x_in.detach();
  r.dim = wrap_dim(dim, x.dim(), op);
  const Tensor moved = x.transpose(r.dim, -1);
  r.moved_shape = moved.sizes();
  const int64_t cols = x.size(r.dim);
  r.rows = moved.contiguous().reshape({cols == 0 ? 0 : x.numel() / cols, cols});
  return r;
}

Tensor RowsAlongDim::restore(const Tensor& row_result) const {
  Shape shape = moved_shape;
  shape.back() = row_result.size(-1);
  Tensor out = row_result.reshape(shape).transpose(dim, -1).contiguous();
  return scalar ? out.reshape({}) : out;
}

}  // namespace autograd

}  // namespace mt
