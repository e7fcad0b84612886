// Reference models by name, for the CLI and the tests.
//
//   mlp     784-256-128-10, ReLU                       235,146 parameters
//   cnn     2 x (conv3x3 + BN + ReLU + maxpool), 2 FC  421,834 parameters (models/cnn.h)
//   resnet  a small ResNet for 28x28 inputs            696,042 parameters (models/cnn.h)
//
// Parameter names and shapes match the PyTorch modules written out in each
// model's comment, so their safetensors checkpoints load into PyTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace mt::models {

struct ModelInfo {
  std::string name;
  std::string description;
};

std::vector<ModelInfo> model_list();
// An mt::Error lists the known names when `name` is unknown.
std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t classes = 10);

}  // namespace mt::models
