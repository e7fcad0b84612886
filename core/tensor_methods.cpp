// Tensor's differentiable methods as calls through the table the autograd
// layer installs (see core/tensor_methods.h for why).
#include "core/tensor_methods.h"

#include "runtime/error.h"

namespace mt {
namespace {

TensorMethods& table() {
  static TensorMethods methods;
  return methods;
}

template <typename Array>
bool all_set(const Array& functions) {
  for (const auto& fn : functions)
    if (fn == nullptr) return false;
  return true;
}

bool complete(const TensorMethods& m) {
  return m.backward && m.view && m.reshape && m.flatten && m.permute && m.transpose && m.narrow && m.slice &&
         m.select && m.expand && m.squeeze_dim && m.squeeze_all && m.unsqueeze && m.contiguous && m.to_dtype &&
         m.to_device && m.clone && all_set(m.unary) && all_set(m.binary) && all_set(m.scalar) &&
         all_set(m.reduce_dims) && all_set(m.extreme_all) && all_set(m.extreme_dim) && m.var && m.clamp &&
         m.masked_fill && m.softmax && m.log_softmax && m.cumsum && m.argmax && m.topk && m.sort && m.argsort;
}

template <typename Enum>
constexpr size_t at(Enum e) {
  return static_cast<size_t>(e);
}

Tensor unary(UnaryMethod op, const Tensor& self) { return tensor_methods().unary[at(op)](self); }
Tensor binary(BinaryMethod op, const Tensor& self, const Tensor& other) {
  return tensor_methods().binary[at(op)](self, other);
}
Tensor scalar(ScalarMethod op, const Tensor& self, double other) {
  return tensor_methods().scalar[at(op)](self, other);
}

}  // namespace

void install_tensor_methods(const TensorMethods& methods) {
  MT_CHECK(complete(methods), "install_tensor_methods: every differentiable Tensor method needs an implementation");
  table() = methods;
}

const TensorMethods& tensor_methods() {
  const TensorMethods& methods = table();
  MT_CHECK(methods.reshape != nullptr,
           "Tensor's differentiable methods (reshape, to, backward, ...) are provided by the autograd layer, "
           "which this program does not link: link the `mixtape` target");
  return methods;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  tensor_methods().backward(*this, gradient, retain_graph);
}
Tensor Tensor::view(const Shape& shape) const { return tensor_methods().view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return tensor_methods().reshape(*this, shape); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return tensor_methods().flatten(*this, start_dim, end_dim);
}
Tensor Tensor::permute(const Shape& dims) const { return tensor_methods().permute(*this, dims); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return tensor_methods().transpose(*this, dim0, dim1); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return tensor_methods().narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return tensor_methods().slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return tensor_methods().select(*this, dim, index); }
Tensor Tensor::expand(const Shape& shape) const { return tensor_methods().expand(*this, shape); }
Tensor Tensor::squeeze(int64_t dim) const { return tensor_methods().squeeze_dim(*this, dim); }
Tensor Tensor::squeeze() const { return tensor_methods().squeeze_all(*this); }
Tensor Tensor::unsqueeze(int64_t dim) const { return tensor_methods().unsqueeze(*this, dim); }
Tensor Tensor::contiguous() const { return tensor_methods().contiguous(*this); }
Tensor Tensor::to(DType dtype) const { return tensor_methods().to_dtype(*this, dtype); }
Tensor Tensor::to(Device device) const { return tensor_methods().to_device(*this, device); }
Tensor Tensor::clone() const { return tensor_methods().clone(*this); }

// ---- op forms
Tensor Tensor::add(const Tensor& other) const { return binary(BinaryMethod::Add, *this, other); }
Tensor Tensor::add(double other) const { return scalar(ScalarMethod::Add, *this, other); }
Tensor Tensor::sub(const Tensor& other) const { return binary(BinaryMethod::Sub, *this, other); }
Tensor Tensor::sub(double other) const { return scalar(ScalarMethod::Sub, *this, other); }
Tensor Tensor::mul(const Tensor& other) const { return binary(BinaryMethod::Mul, *this, other); }
Tensor Tensor::mul(double other) const { return scalar(ScalarMethod::Mul, *this, other); }
Tensor Tensor::div(const Tensor& other) const { return binary(BinaryMethod::Div, *this, other); }
Tensor Tensor::div(double other) const { return scalar(ScalarMethod::Div, *this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return binary(BinaryMethod::Pow, *this, exponent); }
Tensor Tensor::pow(double exponent) const { return scalar(ScalarMethod::Pow, *this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return binary(BinaryMethod::Maximum, *this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return binary(BinaryMethod::Minimum, *this, other); }
Tensor Tensor::matmul(const Tensor& other) const { return binary(BinaryMethod::Matmul, *this, other); }
Tensor Tensor::neg() const { return unary(UnaryMethod::Neg, *this); }
Tensor Tensor::exp() const { return unary(UnaryMethod::Exp, *this); }
Tensor Tensor::log() const { return unary(UnaryMethod::Log, *this); }
Tensor Tensor::sqrt() const { return unary(UnaryMethod::Sqrt, *this); }
Tensor Tensor::rsqrt() const { return unary(UnaryMethod::Rsqrt, *this); }
Tensor Tensor::abs() const { return unary(UnaryMethod::Abs, *this); }
Tensor Tensor::square() const { return unary(UnaryMethod::Square, *this); }
Tensor Tensor::sin() const { return unary(UnaryMethod::Sin, *this); }
Tensor Tensor::cos() const { return unary(UnaryMethod::Cos, *this); }
Tensor Tensor::tanh() const { return unary(UnaryMethod::Tanh, *this); }
Tensor Tensor::sigmoid() const { return unary(UnaryMethod::Sigmoid, *this); }
Tensor Tensor::relu() const { return unary(UnaryMethod::Relu, *this); }
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  return tensor_methods().clamp(*this, min, max);
}
Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  return tensor_methods().masked_fill(*this, mask, value);
}
Tensor Tensor::softmax(int64_t dim) const { return tensor_methods().softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return tensor_methods().log_softmax(*this, dim); }
Tensor Tensor::cumsum(int64_t dim) const { return tensor_methods().cumsum(*this, dim); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return tensor_methods().reduce_dims[at(DimsMethod::Sum)](*this, dims, keepdim);
}
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tensor_methods().reduce_dims[at(DimsMethod::Mean)](*this, dims, keepdim);
}
Tensor Tensor::var(const Shape& dims, double correction, bool keepdim) const {
  return tensor_methods().var(*this, dims, correction, keepdim);
}
Tensor Tensor::max() const { return tensor_methods().extreme_all[at(ExtremeMethod::Max)](*this); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const {
  return tensor_methods().extreme_dim[at(ExtremeMethod::Max)](*this, dim, keepdim);
}
Tensor Tensor::min() const { return tensor_methods().extreme_all[at(ExtremeMethod::Min)](*this); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const {
  return tensor_methods().extreme_dim[at(ExtremeMethod::Min)](*this, dim, keepdim);
}
Tensor Tensor::argmax() const { return tensor_methods().argmax(*this, std::nullopt, false); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return tensor_methods().argmax(*this, dim, keepdim); }
ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest) const {
  return tensor_methods().topk(*this, k, dim, largest);
}
ValuesIndices Tensor::sort(int64_t dim, bool descending) const { return tensor_methods().sort(*this, dim, descending); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return tensor_methods().argsort(*this, dim, descending); }

}  // namespace mt
