// Batches from an in-memory Dataset: seeded shuffling per epoch, optional
// augmentation of images (random crop with padding, horizontal flip), a
// check that every floating-point sample is finite, and a background thread
// that prepares the next batch while the current one trains.
#pragma once

#include <future>
#include <optional>

#include "tools/data/dataset.h"

namespace mt::data {

struct LoaderOptions {
  int64_t batch = 128;
  bool shuffle = true;
  bool augment = false;  // random crop (padding 2) + horizontal flip
  int64_t crop_padding = 2;
  uint64_t seed = 0;
  bool drop_last = false;
  bool prefetch = true;
  bool pinned = false;  // batches in page-locked memory (fast copies to a GPU)
};

struct Batch {
  Tensor inputs;      // [B, ...] (the dataset's inputs, in the epoch's order)
  Tensor targets;     // i64 [B, ...]
  int64_t index = 0;  // batch number within the epoch
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch; its order depends only on (seed, epoch), so a resumed run
  // can skip the batches it already trained on and continue identically.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  std::optional<Batch> next();
  int64_t batches_per_epoch() const;

 private:
  Batch make_batch(int64_t batch_index) const;
  void augment(const float* in, float* out, int64_t sample_index) const;
  void prefetch(int64_t batch_index);

  const Dataset& dataset_;
  LoaderOptions options_;
  Tensor order_;  // i64 permutation of the epoch
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  std::future<Batch> pending_;
};

}  // namespace mt::data
