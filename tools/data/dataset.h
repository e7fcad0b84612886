// Datasets for training, held in memory as sample-major tensors:
//   image classification  inputs f32 [N, C, H, W] (normalised), targets i64 [N]
//   language modelling    inputs i64 [N, T] (a window of tokens), targets i64 [N, T]
//                         (the same window shifted by one: the next token at each position)
//
// Fashion-MNIST comes from Debian's dataset-fashion-mnist package (IDX files
// gzip-compressed, read with zlib). The directory is, in order: the --data
// flag, $MT_FASHION_MNIST, /usr/share/datasets/fashion-mnist.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mt::data {

// One sample: what the model reads and what it should predict.
struct Example {
  Tensor input;
  Tensor target;
};

// A batch: the samples' inputs and targets stacked along a new leading dim.
struct Batch {
  Tensor inputs;      // [B, ...]
  Tensor targets;     // [B, ...]
  int64_t index = 0;  // batch number within the epoch (set by the DataLoader)
};

// Turns the examples of one batch into a Batch (PyTorch's collate_fn).
using CollateFn = std::function<Batch(const std::vector<Example>& examples)>;
// The default collate: stacks inputs and targets (PyTorch's default_collate
// for tensors); every example's input (and target) must have one shape and dtype.
Batch stack_examples(const std::vector<Example>& examples);

// What a DataLoader reads (PyTorch's map-style torch.utils.data.Dataset):
//
//   struct Squares : mt::data::Dataset {
//     int64_t size() const override { return 1000; }
//     mt::data::Example get(int64_t i) const override {
//       return {mt::full({1}, double(i)), mt::full({1}, double(i * i), mt::kI64)};
//     }
//   };
//
// get_batch reads many samples at once; its default collates get(i)'s with
// stack_examples, and a dataset that can gather faster overrides it (as
// TensorDataset does, PyTorch's __getitems__).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  virtual Batch get_batch(std::span<const int64_t> indices) const;
};

// A dataset held in memory as sample-major tensors (every built-in dataset is one).
struct TensorDataset : Dataset {
  Tensor inputs;         // [N, ...]: what the model reads
  Tensor targets;        // i64 [N, ...]: the class of each sample or the next token of each position
  int64_t classes = 10;  // label classes, or the vocabulary size of a token dataset
  int64_t size() const override { return targets.defined() ? targets.size(0) : 0; }
  Example get(int64_t index) const override;
  // Gathers the samples' rows with one copy each, refusing a non-finite f32
  // input (named by its sample index): data other people made is checked.
  Batch get_batch(std::span<const int64_t> indices) const override;
};

struct FashionMnist {
  TensorDataset train;
  TensorDataset test;
  std::string directory;
};

inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST's training-set statistics, used to normalise every split.
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// Where the dataset is looked for (flag, environment, package path).
std::string fashion_mnist_directory(const std::string& flag = "");
// Loads both splits; a missing or corrupt file is an mt::Error naming the
// file and, when absent, the package to install.
// Refuse: a label outside 0..9 is an mt::Error. Keep: it is loaded as it is,
// for `mixtape check-data` to count.
enum class LabelCheck { Refuse, Keep };
FashionMnist load_fashion_mnist(const std::string& directory_flag = "", LabelCheck label_check = LabelCheck::Refuse);

// Reads an IDX image file (magic 0x803) and its label file (magic 0x801).
TensorDataset load_idx(const std::string& images_path, const std::string& labels_path,
                 LabelCheck label_check = LabelCheck::Refuse);

// A synthetic image-classification set for tests and benchmarks: each class
// is a fixed random prototype plus noise, so it is learnable and deterministic.
TensorDataset synthetic_images(int64_t n, int64_t classes, int64_t height, int64_t width, uint64_t seed);

}  // namespace mt::data
