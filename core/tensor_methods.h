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

#include <array>
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace mt {

// The op forms that share a signature sit in arrays indexed by these.
enum class UnaryMethod : uint8_t { Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Sin, Cos, Tanh, Sigmoid, Relu, Count };
enum class BinaryMethod : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Matmul, Count };
enum class ScalarMethod : uint8_t { Add, Sub, Mul, Div, Pow, Count };
enum class DimsMethod : uint8_t { Sum, Mean, Count };  // (x, dims, keepdim)
enum class ExtremeMethod : uint8_t { Max, Min, Count };

template <typename Enum, typename Fn>
using MethodArray = std::array<Fn, static_cast<size_t>(Enum::Count)>;

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

  // op forms (the free functions of autograd/ops.h)
  MethodArray<UnaryMethod, Tensor (*)(const Tensor&)> unary{};
  MethodArray<BinaryMethod, Tensor (*)(const Tensor&, const Tensor&)> binary{};
  MethodArray<ScalarMethod, Tensor (*)(const Tensor&, double)> scalar{};
  MethodArray<DimsMethod, Tensor (*)(const Tensor&, const Shape&, bool)> reduce_dims{};
  MethodArray<ExtremeMethod, Tensor (*)(const Tensor&)> extreme_all{};
  MethodArray<ExtremeMethod, ValuesIndices (*)(const Tensor&, int64_t, bool)> extreme_dim{};
  Tensor (*var)(const Tensor& self, const Shape& dims, double correction, bool keepdim) = nullptr;
  Tensor (*clamp)(const Tensor& self, std::optional<double> min, std::optional<double> max) = nullptr;
  Tensor (*masked_fill)(const Tensor& self, const Tensor& mask, double value) = nullptr;
  Tensor (*softmax)(const Tensor& self, int64_t dim) = nullptr;
  Tensor (*log_softmax)(const Tensor& self, int64_t dim) = nullptr;
  Tensor (*cumsum)(const Tensor& self, int64_t dim) = nullptr;
  // dim: nullopt for the index into the flattened tensor.
  Tensor (*argmax)(const Tensor& self, std::optional<int64_t> dim, bool keepdim) = nullptr;
  ValuesIndices (*topk)(const Tensor& self, int64_t k, int64_t dim, bool largest) = nullptr;
  ValuesIndices (*sort)(const Tensor& self, int64_t dim, bool descending) = nullptr;
  Tensor (*argsort)(const Tensor& self, int64_t dim, bool descending) = nullptr;
};

// Called once by the autograd layer at start-up; every entry must be set.
void install_tensor_methods(const TensorMethods& methods);

// The installed table; an mt::Error naming the missing layer when none is.
const TensorMethods& tensor_methods();

}  // namespace mt
