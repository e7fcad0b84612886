// The autograd layer's implementations of Tensor's differentiable methods
// (defined in autograd/ops_shape.cpp, installed into core's table by
// autograd/tensor_methods.cpp). Call them as methods: x.reshape(...).
#pragma once

#include "core/tensor.h"

namespace mt::autograd::tensor_methods {

void backward(const Tensor& self, const Tensor& gradient, bool retain_graph);
Tensor view(const Tensor& self, const Shape& shape);
Tensor reshape(const Tensor& self, const Shape& shape);
Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim);
Tensor permute(const Tensor& self, const Shape& dims);
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& self, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor select(const Tensor& self, int64_t dim, int64_t index);
Tensor expand(const Tensor& self, const Shape& shape);
Tensor squeeze_dim(const Tensor& self, int64_t dim);
Tensor squeeze_all(const Tensor& self);
Tensor unsqueeze(const Tensor& self, int64_t dim);
Tensor contiguous(const Tensor& self);
Tensor to_dtype(const Tensor& self, DType dtype);
Tensor to_device(const Tensor& self, Device device);
Tensor clone(const Tensor& self);

}  // namespace mt::autograd::tensor_methods
