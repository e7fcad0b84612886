// Installs the autograd layer's Tensor methods into core's table before
// main() runs. Nothing refers to this file, so its library is linked whole
// into every program that uses `mixtape` (WHOLE_ARCHIVE in CMakeLists.txt);
// otherwise the static linker would drop the installer for want of a
// reference.
#include "autograd/tensor_methods.h"

#include "core/tensor_methods.h"

namespace mt::autograd {
namespace {

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
