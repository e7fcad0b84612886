// How core's Tensor reaches its differentiable methods.
//
// reshape, permute, to(dtype), backward and the other methods declared at the
// bottom of mt::Tensor record on the autograd tape and run kernels, both of
// which live in layers above core. So core defines each method as a call
// through this table (core/tensor_methods.cpp), and the autograd layer fills
// the table in when a program starts (autograd/tensor_methods.cpp, linked into
// every program that uses `mixtape`). This is PyTorch's arrangement too:
// c10's TensorBase knows the data, and Tensor's methods reach ATen's
// operators through a table the layer above registers. core compiles and
// links on its own; calling a differentiable method without the autograd
// layer linked is an mt::Error, not an undefined symbol.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mt {

struct TensorMethods {
  void (*backward)(const Tensor& self, const Tensor& gradient, bool retain_graph) = nullptr;
  Tensor (*view)(const Tensor& self, const Shape& shape) = nullptr;
  Tensor (*reshape)(const Tensor& self, const Shape& shape) = nullptr;
  Tensor (*flatten)(const Tensor& self, int64_t start_dim, int64_t end_dim) = nullptr;
  Tensor (*permute)(const Tensor& self, const Shape& dims) = nullptr;
  Tensor (*transpose)(const Tensor& self, int64_t dim0, int64_t dim1) = nullptr;
  Tensor (*narrow)(const Tensor& self, int64_t dim, int64_t start, int64_t length) = nullptr;
  Tensor (*slice)(const Tensor& self, int64_t dim, int64_t start, int64_t end, int64_t step) = nullptr;
  Tensor (*select)(const Tensor& self, int64_t dim, int64_t index) = nullptr;
  Tensor (*expand)(const Tensor& self, const Shape& shape) = nullptr;
  Tensor (*squeeze_dim)(const Tensor& self, int64_t dim) = nullptr;
  Tensor (*squeeze_all)(const Tensor& self) = nullptr;
  Tensor (*unsqueeze)(const Tensor& self, int64_t dim) = nullptr;
  Tensor (*contiguous)(const Tensor& self) = nullptr;
  Tensor (*to_dtype)(const Tensor& self, DType dtype) = nullptr;
  Tensor (*to_device)(const Tensor& self, Device device) = nullptr;
  Tensor (*clone)(const Tensor& self) = nullptr;
};

// Called once by the autograd layer at start-up; every entry must be set.
void install_tensor_methods(const TensorMethods& methods);

// The installed table; an mt::Error naming the missing layer when none is.
const TensorMethods& tensor_methods();

}  // namespace mt
