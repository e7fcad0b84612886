// Installs the autograd layer's Tensor methods into core's table before
// main() runs. Nothing refers to this file, so its library is linked whole
// into every program that uses `mixtape` (WHOLE_ARCHIVE in CMakeLists.txt);
// otherwise the static linker would drop the installer for want of a
// reference.
#include "autograd/tensor_methods.h"

#include "autograd/ops.h"
#include "core/tensor_methods.h"

namespace mt::autograd {
namespace {

template <typename Enum>
constexpr size_t at(Enum e) {
  return static_cast<size_t>(e);
}
using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using WithScalar = Tensor (*)(const Tensor&, double);

void install_op_forms(TensorMethods& m) {
  m.unary[at(UnaryMethod::Neg)] = static_cast<Unary>(mt::neg);
  m.unary[at(UnaryMethod::Exp)] = static_cast<Unary>(mt::exp);
  m.unary[at(UnaryMethod::Log)] = static_cast<Unary>(mt::log);
  m.unary[at(UnaryMethod::Sqrt)] = static_cast<Unary>(mt::sqrt);
  m.unary[at(UnaryMethod::Rsqrt)] = static_cast<Unary>(mt::rsqrt);
  m.unary[at(UnaryMethod::Abs)] = static_cast<Unary>(mt::abs);
  m.unary[at(UnaryMethod::Square)] = static_cast<Unary>(mt::square);
  m.unary[at(UnaryMethod::Sin)] = static_cast<Unary>(mt::sin);
  m.unary[at(UnaryMethod::Cos)] = static_cast<Unary>(mt::cos);
  m.unary[at(UnaryMethod::Tanh)] = static_cast<Unary>(mt::tanh);
  m.unary[at(UnaryMethod::Sigmoid)] = static_cast<Unary>(mt::sigmoid);
  m.unary[at(UnaryMethod::Relu)] = static_cast<Unary>(mt::relu);
  m.binary[at(BinaryMethod::Add)] = static_cast<Binary>(mt::add);
  m.binary[at(BinaryMethod::Sub)] = static_cast<Binary>(mt::sub);
  m.binary[at(BinaryMethod::Mul)] = static_cast<Binary>(mt::mul);
  m.binary[at(BinaryMethod::Div)] = static_cast<Binary>(mt::div);
  m.binary[at(BinaryMethod::Pow)] = static_cast<Binary>(mt::pow);
  m.binary[at(BinaryMethod::Maximum)] = static_cast<Binary>(mt::maximum);
  m.binary[at(BinaryMethod::Minimum)] = static_cast<Binary>(mt::minimum);
  m.binary[at(BinaryMethod::Matmul)] = static_cast<Binary>(mt::matmul);
  m.scalar[at(ScalarMethod::Add)] = static_cast<WithScalar>(mt::add);
  m.scalar[at(ScalarMethod::Sub)] = static_cast<WithScalar>(mt::sub);
  m.scalar[at(ScalarMethod::Mul)] = static_cast<WithScalar>(mt::mul);
  m.scalar[at(ScalarMethod::Div)] = static_cast<WithScalar>(mt::div);
  m.scalar[at(ScalarMethod::Pow)] = static_cast<WithScalar>(mt::pow);
  using Reduce = Tensor (*)(const Tensor&, const Shape&, bool);
  m.reduce_dims[at(DimsMethod::Sum)] = static_cast<Reduce>(mt::sum);
  m.reduce_dims[at(DimsMethod::Mean)] = static_cast<Reduce>(mt::mean);
  m.extreme_all[at(ExtremeMethod::Max)] = static_cast<Unary>(mt::max);
  m.extreme_all[at(ExtremeMethod::Min)] = static_cast<Unary>(mt::min);
  using ExtremeDim = ValuesIndices (*)(const Tensor&, int64_t, bool);
  m.extreme_dim[at(ExtremeMethod::Max)] = static_cast<ExtremeDim>(mt::max);
  m.extreme_dim[at(ExtremeMethod::Min)] = static_cast<ExtremeDim>(mt::min);
  m.var = static_cast<Tensor (*)(const Tensor&, const Shape&, double, bool)>(mt::var);
  m.clamp = mt::clamp;
  m.masked_fill = mt::masked_fill;
  m.softmax = mt::softmax;
  m.log_softmax = mt::log_softmax;
  m.cumsum = mt::cumsum;
  m.argmax = [](const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
    return dim ? mt::argmax(self, *dim, keepdim) : mt::argmax(self);
  };
  m.topk = mt::topk;
  m.sort = mt::sort;
  m.argsort = mt::argsort;
}

TensorMethods autograd_tensor_methods() {
  TensorMethods m;
  m.backward = tensor_methods::backward;
  m.view = tensor_methods::view;
  m.reshape = tensor_methods::reshape;
  m.flatten = tensor_methods::flatten;
  m.permute = tensor_methods::permute;
  m.transpose = tensor_methods::transpose;
  m.narrow = tensor_methods::narrow;
  m.slice = tensor_methods::slice;
  m.select = tensor_methods::select;
  m.expand = tensor_methods::expand;
  m.squeeze_dim = tensor_methods::squeeze_dim;
  m.squeeze_all = tensor_methods::squeeze_all;
  m.unsqueeze = tensor_methods::unsqueeze;
  m.contiguous = tensor_methods::contiguous;
  m.to_dtype = tensor_methods::to_dtype;
  m.to_device = tensor_methods::to_device;
  m.clone = tensor_methods::clone;
  install_op_forms(m);
  return m;
}

// Runs before ordinary static initialisers (GCC/Clang init_priority), so a
// global tensor built in another file may already call x.reshape().
struct Installer {
  Installer() { install_tensor_methods(autograd_tensor_methods()); }
};
__attribute__((init_priority(200))) const Installer installer;

}  // namespace
}  // namespace mt::autograd
