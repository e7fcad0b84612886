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

bool complete(const TensorMethods& m) {
  return m.backward && m.view && m.reshape && m.flatten && m.permute && m.transpose && m.narrow && m.slice &&
         m.select && m.expand && m.squeeze_dim && m.squeeze_all && m.unsqueeze && m.contiguous && m.to_dtype &&
         m.to_device && m.clone;
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

}  // namespace mt
