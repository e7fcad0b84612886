#include "tools/data/loader.h"

#include <cmath>
#include <cstring>

#include "core/generator.h"
#include "core/philox.h"
#include "core/stream.h"

namespace mt::data {

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  MT_CHECK(options.batch > 0, "DataLoader: batch size must be positive, got {}", options.batch);
  MT_CHECK(dataset.images.defined() && dataset.images.dim() == 4 && dataset.images.dtype() == kF32 &&
               dataset.images.is_contiguous(),
           "DataLoader: images must be a contiguous f32 [N, C, H, W] tensor");
  MT_CHECK(dataset.labels.numel() == dataset.images.size(0), "DataLoader: {} images but {} labels",
           dataset.images.size(0), dataset.labels.numel());
  start_epoch(0);
}

DataLoader::~DataLoader() {
  if (pending_.valid()) pending_.wait();
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = dataset_.size();
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
  next_batch_ = skip_batches;
}

Batch DataLoader::make_batch(int64_t batch_index) const {
  const int64_t n = dataset_.size();
  const int64_t begin = batch_index * options_.batch;
  const int64_t count = std::min(options_.batch, n - begin);
  const Shape& s = dataset_.images.sizes();
  const int64_t c = s[1], h = s[2], w = s[3], plane = h * w, sample = c * plane;
  Batch b;
  b.index = batch_index;
  b.images = options_.pinned ? empty_pinned({count, c, h, w}, kF32) : empty({count, c, h, w}, kF32);
  b.labels = empty({count}, kI64);
  const float* src = dataset_.images.data<float>();
  const int64_t* labels = dataset_.labels.data<int64_t>();
  const int64_t* order = order_.data<int64_t>();
  float* dst = b.images.data<float>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = order[begin + i];
    b.labels.data<int64_t>()[i] = labels[k];
    const float* in = src + k * sample;
    float* out = dst + i * sample;
    for (int64_t j = 0; j < sample; ++j) {
      MT_CHECK(std::isfinite(in[j]), "data: sample {} holds a non-finite value ({}) at element {}", k, in[j], j);
    }
    if (!options_.augment) {
      std::memcpy(out, in, static_cast<size_t>(sample) * sizeof(float));
      continue;
    }
    // Per-sample randomness from Philox keyed by (seed, epoch): reproducible.
    const PhiloxBlock r = philox4x32_10(options_.seed ^ (static_cast<uint64_t>(epoch_) << 32), static_cast<uint64_t>(k));
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
