#include "tools/data/registry.h"

#include <algorithm>
#include <filesystem>

#include "autograd/ops.h"
#include "models/bert.h"
#include "runtime/error.h"
#include "tools/data/bpe.h"
#include "tools/data/dataset.h"
#include "tools/data/text.h"

namespace mt::data {
namespace {

std::string fashion_mnist_files(const std::string& data_dir) {
  const std::string dir = fashion_mnist_directory(data_dir);
  const bool found = std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz");
  return fmt::format("{} ({})", found ? "found" : "missing: apt-get install dataset-fashion-mnist", dir);
}

// ---------------------------------------------------------------- the loaders

// The first n samples of `d` (n <= 0: all of them).
TensorDataset limit(const TensorDataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  TensorDataset out = d;
  out.inputs = d.inputs.narrow(0, 0, n).contiguous();
  out.targets = d.targets.narrow(0, 0, n).contiguous();
  return out;
}

// At most n samples spread evenly over `d` (a prefix of a set ordered by
// document would hold only the first genres).
TensorDataset spread(const TensorDataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  std::vector<int64_t> picks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) picks[static_cast<size_t>(i)] = i * d.size() / n;
  const Tensor index = from_vector(picks, {n}, kI64);
  TensorDataset out = d;
  out.inputs = index_select(d.inputs, 0, index).contiguous();
  out.targets = index_select(d.targets, 0, index).contiguous();
  return out;
}

Splits fashion_mnist_splits(const DataRequest& r) {
  FashionMnist f = load_fashion_mnist(r.dir, r.labels);
  return {limit(f.train, r.train_limit), limit(f.test, r.test_limit)};
}

// How many samples of a generated set of `size` a limit keeps: a limit
// only ever shrinks a set (--train-limit 100000000 on a generated set once
// made that many samples, 15 GB of them, instead of limiting).
int64_t limited_size(int64_t size, int64_t limit) { return limit > 0 ? std::min(limit, size) : size; }

// The generated sets' sizes, as a file-backed set has its own.
constexpr int64_t kSyntheticImages = 4096, kSyntheticHeldOutImages = 1024;
constexpr int64_t kSyntheticWindows = 2048, kSyntheticHeldOutWindows = 256;

Splits synthetic_image_splits(const DataRequest& r) {
  return {synthetic_images(limited_size(kSyntheticImages, r.train_limit), 10, 28, 28, 1),
          synthetic_images(limited_size(kSyntheticHeldOutImages, r.test_limit), 10, 28, 28, 2)};
}

// A language model's vocabulary grows to its tokenizer's (models/registry.h), so any tokenizer fits.
Splits brown_splits(const DataRequest& r) {
  TextSplits text = brown_language_model(r.window, r.dir, *make_tokenizer(r.tokenizer));
  return {limit(text.train, r.train_limit), limit(text.validation, r.test_limit)};
}

// The datasets that read text as bytes whatever --tokenizer says refuse it instead.
void check_bytes_only(const DataRequest& r, const char* dataset) {
  MT_CHECK(r.tokenizer == "bytes", "train: --tokenizer {} applies to the brown dataset; {} reads its own tokens",
           r.tokenizer, dataset);
}

Splits synthetic_token_splits(const DataRequest& r) {
  check_bytes_only(r, "synthetic-tokens");
  return {synthetic_tokens(limited_size(kSyntheticWindows, r.train_limit), r.window, r.model.vocab, 1),
          synthetic_tokens(limited_size(kSyntheticHeldOutWindows, r.test_limit), r.window, r.model.vocab, 1,
                           /*stream=*/1)};
}

Splits brown_genre_splits(const DataRequest& r) {
  check_bytes_only(r, "brown-genre");
  static_assert(kClsToken == models::kBertCls && kPadToken == models::kBertPad);
  TextSplits passages = brown_genre_passages(r.window, r.dir);
  return {spread(passages.train, r.train_limit), spread(passages.validation, r.test_limit)};
}

}  // namespace

const std::vector<DatasetInfo>& dataset_list() {
  using models::ModelTask;
  static const std::vector<DatasetInfo> all = {
      {"fashion-mnist", ModelTask::ImageClassification, "mlp", "Zalando's 28x28 clothing images", fashion_mnist_files,
       fashion_mnist_splits},
      {"synthetic", ModelTask::ImageClassification, "mlp", "generated images", nullptr, synthetic_image_splits},
      {"brown", ModelTask::LanguageModel, "gpt-tiny", "bytes of the Brown corpus", nullptr, brown_splits},
      {"synthetic-tokens", ModelTask::LanguageModel, "gpt-tiny", "generated tokens", nullptr, synthetic_token_splits},
      {"brown-genre", ModelTask::TextClassification, "bert-tiny", "Brown passages labelled by genre", nullptr,
       brown_genre_splits},
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
