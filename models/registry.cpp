#include "models/registry.h"

#include <functional>

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
