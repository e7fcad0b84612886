#include "tools/data/loader.h"

#include <cmath>
#include <cstring>

#include "core/generator.h"
#include "core/philox.h"
#include "core/stream.h"

namespace mt::data {

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  MT_CHECK(options.batch > 0, "DataLoader: batch size must be positive, got {}", options.batch);
  MT_CHECK(dataset.inputs.defined() && dataset.inputs.dim() >= 1 && dataset.inputs.is_contiguous() &&
               dataset.inputs.device().is_cpu(),
           "DataLoader: inputs must be a contiguous CPU tensor [N, ...]");
  MT_CHECK(dataset.targets.defined() && dataset.targets.dim() >= 1 && dataset.targets.dtype() == kI64 &&
               dataset.targets.is_contiguous() && dataset.targets.device().is_cpu(),
           "DataLoader: targets must be a contiguous i64 CPU tensor [N, ...]");
  MT_CHECK(dataset.targets.size(0) == dataset.inputs.size(0), "DataLoader: {} inputs but {} targets",
           dataset.inputs.size(0), dataset.targets.size(0));
  MT_CHECK(!options.augment || (dataset.inputs.dim() == 4 && dataset.inputs.dtype() == kF32),
           "DataLoader: augmentation needs f32 images [N, C, H, W], got {} {}", dataset.inputs.shape_string(),
           dataset.inputs.dtype());
  MT_CHECK(options.shard_count >= 1 && options.shard_rank >= 0 && options.shard_rank < options.shard_count,
           "DataLoader: shard {} of {} does not exist", options.shard_rank, options.shard_count);
  MT_CHECK(samples_per_epoch() > 0, "DataLoader: {} samples leave nothing for each of {} ranks", dataset.size(),
           options.shard_count);
  start_epoch(0);
}

DataLoader::~DataLoader() {
  if (pending_.valid()) pending_.wait();
}

int64_t DataLoader::samples_per_epoch() const {
  const int64_t n = dataset_.size(), ranks = options_.shard_count;
  return options_.drop_uneven ? n / ranks : (n + ranks - 1) / ranks;
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = samples_per_epoch();
  return options_.drop_last ? n / options_.batch : (n + options_.batch - 1) / options_.batch;
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  if (pending_.valid()) pending_.wait();
  pending_ = {};
  epoch_ = epoch;
  if (options_.shuffle) {
    Generator gen(options_.seed * 1000003ull + static_cast<uint64_t>(epoch));
    order_ = randperm(dataset_.size(), &gen);
  } else {
    order_ = arange(0, static_cast<double>(dataset_.size()), 1, kI64);
  }
  if (options_.shard_count > 1) order_ = shard_of(order_);
  next_batch_ = skip_batches;
}

// This rank's samples of the epoch's order: every shard_count-th from
// shard_rank on, over the order wrapped around to a multiple of shard_count.
Tensor DataLoader::shard_of(const Tensor& order) const {
  const int64_t n = order.numel(), m = samples_per_epoch();
  Tensor shard = empty({m}, kI64);
  const int64_t* all = order.data<int64_t>();
  int64_t* mine = shard.data<int64_t>();
  for (int64_t i = 0; i < m; ++i) mine[i] = all[(i * options_.shard_count + options_.shard_rank) % n];
  return shard;
}

namespace {

// `per_sample`'s shape with its leading (sample) dimension set to `n`.
Shape with_batch(const Tensor& per_sample, int64_t n) {
  Shape shape = per_sample.sizes();
  shape[0] = n;
  return shape;
}

void check_finite(const float* sample, int64_t count, int64_t index) {
  for (int64_t j = 0; j < count; ++j) {
    MT_CHECK(std::isfinite(sample[j]), "data: sample {} holds a non-finite value ({}) at element {}", index, sample[j],
             j);
  }
}

}  // namespace

// Random crop (with padding) and horizontal flip of one [C, H, W] image.
void DataLoader::augment(const float* in, float* out, int64_t sample_index) const {
  const Shape& s = dataset_.inputs.sizes();
  const int64_t c = s[1], h = s[2], w = s[3], plane = h * w;
  // Per-sample randomness from Philox keyed by (seed, epoch): reproducible.
  const PhiloxBlock r =
      philox4x32_10(options_.seed ^ (static_cast<uint64_t>(epoch_) << 32), static_cast<uint64_t>(sample_index));
  const int64_t pad = options_.crop_padding;
  const int64_t dy = static_cast<int64_t>(r.word[0] % static_cast<uint32_t>(2 * pad + 1)) - pad;
  const int64_t dx = static_cast<int64_t>(r.word[1] % static_cast<uint32_t>(2 * pad + 1)) - pad;
  const bool flip = (r.word[2] & 1u) != 0;
  // Pixels outside the padded image are the normalised zero (the background).
  const float background = static_cast<float>(-kFashionMnistMean / kFashionMnistStd);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sy = y + dy, sx0 = x + dx;
        const int64_t sx = flip ? w - 1 - sx0 : sx0;
        const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        out[ch * plane + y * w + x] = inside ? in[ch * plane + sy * w + sx] : background;
      }
    }
  }
}

Batch DataLoader::make_batch(int64_t batch_index) const {
  const int64_t n = samples_per_epoch();
  const int64_t dataset_size = dataset_.size();
  const int64_t begin = batch_index * options_.batch;
  const int64_t count = std::min(options_.batch, n - begin);
  const DType input_type = dataset_.inputs.dtype();
  const MemoryCategoryScope data_memory(MemoryCategory::Data);
  Batch b;
  b.index = batch_index;
  const Shape input_shape = with_batch(dataset_.inputs, count);
  b.inputs = options_.pinned ? empty_pinned(input_shape, input_type) : empty(input_shape, input_type);
  b.targets = empty(with_batch(dataset_.targets, count), kI64);
  const size_t input_bytes = dataset_.inputs.nbytes() / static_cast<size_t>(dataset_size);
  const size_t target_bytes = dataset_.targets.nbytes() / static_cast<size_t>(dataset_size);
  const auto* inputs = static_cast<const char*>(dataset_.inputs.data_ptr());
  const auto* targets = static_cast<const char*>(dataset_.targets.data_ptr());
  auto* input_out = static_cast<char*>(b.inputs.data_ptr());
  auto* target_out = static_cast<char*>(b.targets.data_ptr());
  const int64_t* order = order_.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<size_t>(order[begin + i]);
    const auto at = static_cast<size_t>(i);
    std::memcpy(target_out + at * target_bytes, targets + k * target_bytes, target_bytes);
    const char* in = inputs + k * input_bytes;
    char* out = input_out + at * input_bytes;
    if (input_type == kF32) {
      check_finite(reinterpret_cast<const float*>(in), static_cast<int64_t>(input_bytes / sizeof(float)),
                   static_cast<int64_t>(k));
    }
    if (options_.augment) {
      augment(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out), static_cast<int64_t>(k));
    } else {
      std::memcpy(out, in, input_bytes);
    }
  }
  return b;
}

void DataLoader::prefetch(int64_t batch_index) {
  if (batch_index >= batches_per_epoch()) return;
  if (!options_.prefetch) return;
  pending_ = std::async(std::launch::async, [this, batch_index] { return make_batch(batch_index); });
}

std::optional<Batch> DataLoader::next() {
  if (next_batch_ >= batches_per_epoch()) return std::nullopt;
  Batch b = pending_.valid() ? pending_.get() : make_batch(next_batch_);
  ++next_batch_;
  prefetch(next_batch_);
  return b;
}

}  // namespace mt::data
