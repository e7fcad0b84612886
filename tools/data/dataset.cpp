#include "tools/data/dataset.h"

#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/generator.h"

namespace mt::data {

Batch stack_examples(const std::vector<Example>& examples) {
  MT_CHECK(!examples.empty(), "collate: a batch needs at least one example");
  std::vector<Tensor> inputs, targets;
  for (const Example& e : examples) {
    MT_CHECK(e.input.defined() && e.target.defined(), "collate: an example without an input or a target");
    MT_CHECK(e.input.sizes() == examples[0].input.sizes() && e.input.dtype() == examples[0].input.dtype() &&
                 e.target.sizes() == examples[0].target.sizes() && e.target.dtype() == examples[0].target.dtype(),
             "collate: examples of different shapes or dtypes ({} {} vs {} {}); give the DataLoader a collate "
             "function that pads them",
             e.input.shape_string(), e.input.dtype(), examples[0].input.shape_string(), examples[0].input.dtype());
    inputs.push_back(e.input.detach());
    targets.push_back(e.target.detach());
  }
  const NoGradGuard no_grad;
  return {stack(inputs), stack(targets), 0};
}

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return stack_examples(examples);
}

namespace {

void check_sample_index(int64_t index, int64_t size) {
  MT_CHECK(index >= 0 && index < size, "dataset: sample {} is out of range for {} samples", index, size);
}

void check_finite(const float* sample, int64_t count, int64_t index) {
  for (int64_t j = 0; j < count; ++j) {
    MT_CHECK(std::isfinite(sample[j]), "data: sample {} holds a non-finite value ({}) at element {}", index, sample[j],
             j);
  }
}

// `per_sample`'s shape with its leading (sample) dimension set to `n`.
Shape with_batch(const Tensor& per_sample, int64_t n) {
  Shape shape = per_sample.sizes();
  shape[0] = n;
  return shape;
}

}  // namespace

Example TensorDataset::get(int64_t index) const {
  check_sample_index(index, size());
  return {inputs.select(0, index), targets.select(0, index)};
}

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  MT_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.is_contiguous() && inputs.device().is_cpu(),
           "TensorDataset: inputs must be a contiguous CPU tensor [N, ...]");
  MT_CHECK(targets.defined() && targets.dim() >= 1 && targets.is_contiguous() && targets.device().is_cpu(),
           "TensorDataset: targets must be a contiguous CPU tensor [N, ...]");
  MT_CHECK(targets.size(0) == inputs.size(0), "TensorDataset: {} inputs but {} targets", inputs.size(0),
           targets.size(0));
  const int64_t n = size(), count = static_cast<int64_t>(indices.size());
  const MemoryCategoryScope data_memory(MemoryCategory::Data);
  Batch b{empty(with_batch(inputs, count), inputs.dtype()), empty(with_batch(targets, count), targets.dtype()), 0};
  const size_t input_bytes = n == 0 ? 0 : inputs.nbytes() / static_cast<size_t>(n);
  const size_t target_bytes = n == 0 ? 0 : targets.nbytes() / static_cast<size_t>(n);
  const auto* in = static_cast<const char*>(inputs.data_ptr());
  const auto* tg = static_cast<const char*>(targets.data_ptr());
  auto* in_out = static_cast<char*>(b.inputs.data_ptr());
  auto* tg_out = static_cast<char*>(b.targets.data_ptr());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = indices[static_cast<size_t>(i)];
    check_sample_index(k, n);
    const char* sample = in + static_cast<size_t>(k) * input_bytes;
    if (inputs.dtype() == kF32) {
      check_finite(reinterpret_cast<const float*>(sample), static_cast<int64_t>(input_bytes / sizeof(float)), k);
    }
    std::memcpy(in_out + static_cast<size_t>(i) * input_bytes, sample, input_bytes);
    std::memcpy(tg_out + static_cast<size_t>(i) * target_bytes, tg + static_cast<size_t>(k) * target_bytes,
                target_bytes);
  }
  return b;
}
namespace {

// More than any IDX file mixtape reads (Fashion-MNIST's largest is 47 MB):
// a gzip bomb stops here instead of exhausting memory.
constexpr size_t kMaxDecompressedBytes = size_t{1} << 30;

// The whole (decompressed) content of a .gz file, or of a plain file.
std::vector<uint8_t> read_gz(const std::string& path) {
  std::error_code ec;
  // A FIFO or a device (/dev/zero) would block or never end: regular files only.
  MT_CHECK(std::filesystem::is_regular_file(path, ec), "'{}' is not a regular file", path);
  gzFile file = gzopen(path.c_str(), "rb");
  MT_CHECK(file != nullptr, "cannot open '{}'", path);
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(file, gzclose);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      fail("'{}' is corrupt: {}", path, gzerror(file, &code));
    }
    if (n == 0) break;
    MT_CHECK(out.size() + static_cast<size_t>(n) <= kMaxDecompressedBytes,
             "'{}' decompresses to more than {} MiB, more than any dataset file mixtape reads (a gzip bomb?)", path,
             kMaxDecompressedBytes >> 20);
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  return out;
}

uint32_t big_endian_u32(const std::vector<uint8_t>& bytes, size_t at) {
  return (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) | (uint32_t{bytes[at + 2]} << 8) |
         uint32_t{bytes[at + 3]};
}

}  // namespace

TensorDataset load_idx(const std::string& images_path, const std::string& labels_path, LabelCheck label_check) {
  const std::vector<uint8_t> images = read_gz(images_path);
  const std::vector<uint8_t> labels = read_gz(labels_path);
  MT_CHECK(images.size() >= 16 && big_endian_u32(images, 0) == 0x00000803,
           "'{}' is not an IDX image file (expected magic 0x00000803)", images_path);
  MT_CHECK(labels.size() >= 8 && big_endian_u32(labels, 0) == 0x00000801,
           "'{}' is not an IDX label file (expected magic 0x00000801)", labels_path);
  const int64_t n = big_endian_u32(images, 4), rows = big_endian_u32(images, 8), cols = big_endian_u32(images, 12);
  const int64_t n_labels = big_endian_u32(labels, 4);
  MT_CHECK(n == n_labels, "'{}' holds {} images but '{}' holds {} labels", images_path, n, labels_path, n_labels);
  // In 128 bits: three 32-bit header fields multiply past int64.
  const auto needed = static_cast<__int128>(16) + static_cast<__int128>(n) * rows * cols;
  MT_CHECK(needed == static_cast<__int128>(images.size()),
           "'{}' is truncated or does not match its header: {} images of {}x{} need {} bytes, the file has {}",
           images_path, n, rows, cols,
           needed > static_cast<__int128>(INT64_MAX) ? std::string("more than 2^63")
                                                     : std::to_string(static_cast<int64_t>(needed)),
           images.size());
  MT_CHECK(static_cast<int64_t>(labels.size()) == 8 + n, "'{}' is truncated: {} labels need {} bytes, it has {}",
           labels_path, n, 8 + n, labels.size());

  TensorDataset d;
  d.inputs = empty({n, 1, rows, cols}, kF32);
  float* px = d.inputs.data<float>();
  const auto inv_std = static_cast<float>(1.0 / kFashionMnistStd);
  for (int64_t i = 0; i < n * rows * cols; ++i) {
    px[i] = (static_cast<float>(images[static_cast<size_t>(16 + i)]) / 255.0f - static_cast<float>(kFashionMnistMean)) *
            inv_std;
  }
  d.targets = empty({n}, kI64);
  int64_t* py = d.targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    py[i] = labels[static_cast<size_t>(8 + i)];
    MT_CHECK(py[i] < 10 || label_check == LabelCheck::Keep,
             "'{}': label {} of sample {} is not a Fashion-MNIST class (0..9); `mixtape check-data` lists them all",
             labels_path, py[i], i);
  }
  return d;
}

std::string fashion_mnist_directory(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("MT_FASHION_MNIST"); env != nullptr && *env != '\0') return env;
  return kFashionMnistDefaultDir;
}

FashionMnist load_fashion_mnist(const std::string& directory_flag, LabelCheck label_check) {
  const std::string dir = fashion_mnist_directory(directory_flag);
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"}) {
    MT_CHECK(std::filesystem::exists(std::filesystem::path(dir) / name),
             "Fashion-MNIST not found: '{}/{}' does not exist. Install Debian's package (sudo apt-get install "
             "dataset-fashion-mnist) or point --data / MT_FASHION_MNIST at a directory with the four IDX .gz files",
             dir, name);
  }
  FashionMnist out;
  out.directory = dir;
  out.train = load_idx(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz", label_check);
  out.test = load_idx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz", label_check);
  // The models are built for 28x28 images: say so naming the file, not with a shape error inside a layer.
  for (const auto& [split, file] :
       {std::pair{&out.train, "train-images-idx3-ubyte.gz"}, std::pair{&out.test, "t10k-images-idx3-ubyte.gz"}}) {
    MT_CHECK(split->inputs.size(2) == 28 && split->inputs.size(3) == 28,
             "'{}/{}' holds {}x{} images; Fashion-MNIST's are 28x28", dir, file, split->inputs.size(2),
             split->inputs.size(3));
  }
  return out;
}

TensorDataset synthetic_images(int64_t n, int64_t classes, int64_t height, int64_t width, uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  const Tensor prototypes = randn({classes, 1, height, width}, kF32, kCPU, &gen);
  TensorDataset d;
  d.classes = classes;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % classes;
  d.targets = from_vector(labels, {n});
  const Tensor noise = randn({n, 1, height, width}, kF32, kCPU, &gen);
  d.inputs = add(index_select(prototypes, 0, d.targets), mul(noise, 1.5)).contiguous();
  return d;
}

}  // namespace mt::data
