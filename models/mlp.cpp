#include "models/mlp.h"

namespace mt::models {

Mlp::Mlp(int64_t inputs, int64_t classes) {
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(inputs, 256));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 128));
  fc3 = register_module("fc3", std::make_shared<nn::Linear>(128, classes));
}

Tensor Mlp::forward(const Tensor& x) {
  const nn::ForwardScope scope(*this);
  // Linear + ReLU as one GEMM each (bias and ReLU in the epilogue).
  Tensor h = fc1->forward(x.flatten(1), LinearActivation::Relu);
  h = fc2->forward(h, LinearActivation::Relu);
  return fc3->forward(h);
}

}  // namespace mt::models
