// Batches from a Dataset (tools/data/dataset.h): shuffling per epoch,
// sharding for data parallel, a collate function, optional augmentation of
// images (random crop with padding, horizontal flip), and a background
// thread that prepares the next batch while the current one trains:
//
//   mt::data::DataLoader loader(dataset, {.batch = 64, .seed = 1});
//   for (int64_t epoch = 0; epoch < 3; ++epoch) {
//     loader.start_epoch(epoch);
//     while (auto batch = loader.next()) train_on(batch->inputs, batch->targets);
//   }
#pragma once

#include <future>
#include <optional>

#include "core/generator.h"
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
  // Data parallel (PyTorch's DistributedSampler): every rank shuffles the
  // epoch with the same seed and reads every shard_count-th sample of it from
  // shard_rank on, so the ranks' batches b together are one batch of
  // shard_count x batch samples. When the sample count does not divide, the
  // order wraps around to pad the last shard (as PyTorch does), or with
  // drop_uneven the tail is left out; every rank has as many batches.
  int64_t shard_rank = 0;
  int64_t shard_count = 1;
  bool drop_uneven = false;
  // Each epoch's order drawn from this generator (PyTorch's
  // DataLoader(generator=...)) instead of from (seed, epoch); its state
  // then decides the order, so it must be the same on every rank.
  Generator* generator = nullptr;
};

class DataLoader {
 public:
  // `collate`: how a batch's examples become a Batch; empty: the dataset's
  // own get_batch (stacking, or TensorDataset's gather).
  DataLoader(const Dataset& dataset, LoaderOptions options, CollateFn collate = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch; its order depends only on (seed, epoch), so a resumed run
  // can skip the batches it already trained on and continue identically.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  // Starts an epoch at sample `first` of its order, counting every rank's
  // samples (0 <= first <= the dataset's size): the ranks share out the
  // rest of the order as they share a whole epoch. A run resumed at another
  // world size continues at the sample where the saving run stopped
  // (Megatron's consumed_samples); at the same world size and a whole
  // number of batches it is start_epoch(epoch, skip_batches).
  void start_epoch_at_sample(int64_t epoch, int64_t first);
  std::optional<Batch> next();
  int64_t batches_per_epoch() const;  // of a whole epoch
  int64_t samples_per_epoch() const;  // of a whole epoch, this rank's (its shard)
  // The current epoch's batches are [first_batch(), end_batch()), numbered
  // as in a whole epoch: one started at sample `first` begins at batch
  // first / (batch x shard_count).
  int64_t first_batch() const { return first_batch_; }
  int64_t end_batch() const { return end_batch_; }
  // Samples of the epoch's order (all ranks') handed out up to and
  // including batch `index` of the current epoch: where to resume after it.
  int64_t samples_through(int64_t batch_index) const;

 private:
  Batch make_batch(int64_t batch_index) const;
  Tensor shard_of(const Tensor& order) const;
  void augment(const float* in, float* out, const Shape& image, int64_t sample_index) const;
  void prefetch(int64_t batch_index);

  const Dataset& dataset_;
  LoaderOptions options_;
  CollateFn collate_;
  int64_t rank_samples(int64_t first) const;  // this rank's share of the order from `first` on
  Tensor order_;  // i64: this rank's samples of the epoch, from first_ on
  int64_t epoch_ = 0;
  int64_t first_ = 0;         // the sample of the epoch's order this epoch started at
  int64_t first_batch_ = 0;   // the number its first batch has
  int64_t end_batch_ = 0;
  int64_t next_batch_ = 0;
  std::future<Batch> pending_;
};

}  // namespace mt::data
