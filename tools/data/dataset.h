// Datasets for training, held in memory as sample-major tensors:
//   image classification  inputs f32 [N, C, H, W] (normalised), targets i64 [N]
//   language modelling    inputs i64 [N, T] (a window of tokens), targets i64 [N, T]
//                         (the same window shifted by one: the next token at each position)
//
// Fashion-MNIST comes from Debian's dataset-fashion-mnist package (IDX files
// gzip-compressed, read with zlib). The directory is, in order: the --data
// flag, $MT_FASHION_MNIST, /usr/share/datasets/fashion-mnist.
#pragma once

#include <string>

#include "core/tensor.h"

namespace mt::data {

struct Dataset {
  Tensor inputs;         // [N, ...]: what the model reads
  Tensor targets;        // i64 [N, ...]: the class of each sample or the next token of each position
  int64_t classes = 10;  // label classes, or the vocabulary size of a token dataset
  int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

struct FashionMnist {
  Dataset train;
  Dataset test;
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
Dataset load_idx(const std::string& images_path, const std::string& labels_path,
                 LabelCheck label_check = LabelCheck::Refuse);

// A synthetic image-classification set for tests and benchmarks: each class
// is a fixed random prototype plus noise, so it is learnable and deterministic.
Dataset synthetic_images(int64_t n, int64_t classes, int64_t height, int64_t width, uint64_t seed);

}  // namespace mt::data
