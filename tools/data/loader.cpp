#include "tools/data/loader.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "core/generator.h"
#include "core/philox.h"
#include "core/stream.h"

namespace mt::data {

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options, CollateFn collate)
    : dataset_(dataset), options_(options), collate_(std::move(collate)) {
  MT_CHECK(options.batch > 0, "DataLoader: batch size must be positive, got {}", options.batch);
  MT_CHECK(options.shard_count >= 1 && options.shard_rank >= 0 && options.shard_rank < options.shard_count,
           "DataLoader: shard {} of {} does not exist", options.shard_rank, options.shard_count);
  MT_CHECK(samples_per_epoch() > 0, "DataLoader: {} samples leave nothing for each of {} ranks", dataset.size(),
           options.shard_count);
  if (options.augment) {
    const Tensor first = dataset.get(0).input;
    MT_CHECK(first.dim() == 3 && first.dtype() == kF32,
             "DataLoader: augmentation needs f32 images [C, H, W], got {} {}", first.shape_string(), first.dtype());
  }
  start_epoch(0);
}

DataLoader::~DataLoader() {
  if (pending_.valid()) pending_.wait();
}

int64_t DataLoader::rank_samples(int64_t first) const {
  const int64_t n = dataset_.size() - first, ranks = options_.shard_count;
  return options_.drop_uneven ? n / ranks : (n + ranks - 1) / ranks;
}

int64_t DataLoader::samples_per_epoch() const { return rank_samples(0); }

namespace {
int64_t batches_of(int64_t samples, int64_t batch, bool drop_last) {
  return drop_last ? samples / batch : (samples + batch - 1) / batch;
}
}  // namespace

int64_t DataLoader::batches_per_epoch() const {
  return batches_of(samples_per_epoch(), options_.batch, options_.drop_last);
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  MT_CHECK(skip_batches >= 0, "DataLoader: cannot skip {} batches", skip_batches);
  const int64_t skipped = std::min(skip_batches, batches_per_epoch());
  start_epoch_at_sample(epoch, std::min(skipped * options_.batch * options_.shard_count, dataset_.size()));
}

void DataLoader::start_epoch_at_sample(int64_t epoch, int64_t first) {
  MT_CHECK(first >= 0 && first <= dataset_.size(), "DataLoader: an epoch of {} samples cannot start at sample {}",
           dataset_.size(), first);
  if (pending_.valid()) pending_.wait();
  pending_ = {};
  epoch_ = epoch;
  first_ = first;
  if (options_.shuffle && options_.generator != nullptr) {
    order_ = randperm(dataset_.size(), options_.generator);
  } else if (options_.shuffle) {
    Generator gen(options_.seed * 1000003ull + static_cast<uint64_t>(epoch));
    order_ = randperm(dataset_.size(), &gen);
  } else {
    order_ = arange(0, static_cast<double>(dataset_.size()), 1, kI64);
  }
  order_ = shard_of(order_);
  first_batch_ = first / (options_.batch * options_.shard_count);
  end_batch_ = first_batch_ + batches_of(rank_samples(first), options_.batch, options_.drop_last);
  next_batch_ = first_batch_;
}

int64_t DataLoader::samples_through(int64_t batch_index) const {
  const int64_t handed_out = (batch_index + 1 - first_batch_) * options_.batch * options_.shard_count;
  return std::min(first_ + handed_out, dataset_.size());
}

// This rank's samples of the epoch's order from first_ on: every
// shard_count-th from first_ + shard_rank, over the order wrapped around
// to pad the last shard (so every rank has as many).
Tensor DataLoader::shard_of(const Tensor& order) const {
  const int64_t n = order.numel(), m = rank_samples(first_);
  Tensor shard = empty({m}, kI64);
  const int64_t* all = order.data<int64_t>();
  int64_t* mine = shard.data<int64_t>();
  for (int64_t i = 0; i < m; ++i) mine[i] = all[(first_ + i * options_.shard_count + options_.shard_rank) % n];
  return shard;
}

// Random crop (with padding) and horizontal flip of one [C, H, W] image.
void DataLoader::augment(const float* in, float* out, const Shape& image, int64_t sample_index) const {
  const int64_t c = image[0], h = image[1], w = image[2], plane = h * w;
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
  const int64_t begin = (batch_index - first_batch_) * options_.batch;
  const int64_t count = std::min(options_.batch, order_.numel() - begin);
  const std::span<const int64_t> indices(order_.data<int64_t>() + begin, static_cast<size_t>(count));
  const MemoryCategoryScope data_memory(MemoryCategory::Data);  // a collate function's tensors too
  Batch b;
  if (collate_) {
    std::vector<Example> examples;
    examples.reserve(indices.size());
    for (int64_t i : indices) examples.push_back(dataset_.get(i));
    b = collate_(examples);
  } else {
    b = dataset_.get_batch(indices);
  }
  MT_CHECK(b.inputs.defined() && b.targets.defined() && b.inputs.dim() >= 1 && b.inputs.size(0) == count,
           "DataLoader: batch {} should hold {} samples, got inputs {}", batch_index, count,
           b.inputs.defined() ? b.inputs.shape_string() : std::string("(none)"));
  b.index = batch_index;
  if (options_.augment) {
    const Tensor source = b.inputs.contiguous();
    Tensor augmented = empty(source.sizes(), kF32);
    const Shape image(source.sizes().begin() + 1, source.sizes().end());
    const int64_t per_image = source.numel() / count;
    for (int64_t i = 0; i < count; ++i) {
      augment(source.data<float>() + i * per_image, augmented.data<float>() + i * per_image, image,
              indices[static_cast<size_t>(i)]);
    }
    b.inputs = augmented;
  }
  if (options_.pinned) {  // one more copy of the batch, into page-locked memory
    Tensor pinned = empty_pinned(b.inputs.sizes(), b.inputs.dtype());
    std::memcpy(pinned.data_ptr(), b.inputs.contiguous().data_ptr(), b.inputs.nbytes());
    b.inputs = pinned;
  }
  return b;
}

void DataLoader::prefetch(int64_t batch_index) {
  if (batch_index >= end_batch_) return;
  if (!options_.prefetch) return;
  pending_ = std::async(std::launch::async, [this, batch_index] { return make_batch(batch_index); });
}

std::optional<Batch> DataLoader::next() {
  if (next_batch_ >= end_batch_) return std::nullopt;
  Batch b = pending_.valid() ? pending_.get() : make_batch(next_batch_);
  ++next_batch_;
  prefetch(next_batch_);
  return b;
}

}  // namespace mt::data
