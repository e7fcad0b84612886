#include "tools/data/registry.h"

#include <filesystem>

#include "runtime/error.h"
#include "tools/data/dataset.h"

namespace mt::data {
namespace {

std::string fashion_mnist_files(const std::string& data_dir) {
  const std::string dir = fashion_mnist_directory(data_dir);
  const bool found = std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz");
  return fmt::format("{} ({})", found ? "found" : "missing: apt-get install dataset-fashion-mnist", dir);
}

}  // namespace

const std::vector<DatasetInfo>& dataset_list() {
  using models::ModelTask;
  static const std::vector<DatasetInfo> all = {
      {"fashion-mnist", ModelTask::ImageClassification, "mlp", "Zalando's 28x28 clothing images", fashion_mnist_files},
      {"synthetic", ModelTask::ImageClassification, "mlp", "generated images"},
      {"brown", ModelTask::LanguageModel, "gpt-tiny", "bytes of the Brown corpus"},
      {"synthetic-tokens", ModelTask::LanguageModel, "gpt-tiny", "generated tokens"},
      {"brown-genre", ModelTask::TextClassification, "bert-tiny", "Brown passages labelled by genre"},
  };
  return all;
}

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : dataset_list()) names.push_back(d.name);
  return names;
}

const DatasetInfo& find_dataset(std::string_view name) {
  for (const DatasetInfo& d : dataset_list()) {
    if (d.name == name) return d;
  }
  std::vector<std::string> names = dataset_names();
  const std::string last = names.back();
  names.pop_back();
  fail("unknown dataset '{}': expected {} or {}", name, fmt::join(names, ", "), last);
}

const DatasetInfo& default_dataset(models::ModelTask task) {
  for (const DatasetInfo& d : dataset_list()) {
    if (d.task == task) return d;
  }
  fail("no dataset trains task {}", static_cast<int>(task));
}

}  // namespace mt::data
