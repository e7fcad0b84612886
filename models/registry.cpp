#include "models/registry.h"

#include <functional>

#include "models/cnn.h"
#include "models/mlp.h"

namespace mt::models {
namespace {

struct Entry {
  ModelInfo info;
  std::function<std::shared_ptr<nn::Module>(int64_t classes)> make;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      {{"mlp", "784-256-128-10 MLP with ReLU (235,146 parameters)"},
       [](int64_t classes) { return std::make_shared<Mlp>(784, classes); }},
      {{"cnn", "2 x (conv3x3 + BN + ReLU + maxpool) + 2 FC (421,834 parameters)"},
       [](int64_t classes) { return std::make_shared<Cnn>(classes); }},
      {{"resnet", "ResNet for 28x28: 3 stages x 2 BasicBlocks, 32/64/128 channels (696,042 parameters)"},
       [](int64_t classes) { return std::make_shared<ResNet>(classes); }},
  };
  return all;
}

}  // namespace

std::vector<ModelInfo> model_list() {
  std::vector<ModelInfo> out;
  for (const Entry& e : entries()) out.push_back(e.info);
  return out;
}

std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t classes) {
  std::vector<std::string> names;
  for (const Entry& e : entries()) {
    if (e.info.name == name) return e.make(classes);
    names.push_back(e.info.name);
  }
  fail("unknown model '{}': known models are {}", name, fmt::join(names, ", "));
}

}  // namespace mt::models
