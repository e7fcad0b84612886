// The DataLoader over the Dataset interface: a user's own dataset, the
// default and a custom collate, shuffling with a Generator, sharding, and
// prefetching on a worker thread.
#include <algorithm>
#include <catch2/catch.hpp>
#include <mutex>
#include <set>
#include <thread>

#include "mixtape.h"
#include "tools/data/loader.h"

using namespace mt;
using Catch::Contains;

namespace {

// Sample i: input [i, -i] (f32), target i * i (i64). Records the threads that read it.
struct Squares : data::Dataset {
  int64_t n;
  mutable std::mutex mutex;
  mutable std::set<std::thread::id> readers;
  explicit Squares(int64_t count) : n(count) {}
  int64_t size() const override { return n; }
  data::Example get(int64_t i) const override {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      readers.insert(std::this_thread::get_id());
    }
    return {from_vector(std::vector<double>{double(i), double(-i)}, {2}), full({}, double(i * i), kI64)};
  }
};

// Sequences of length 1 + i % 3: the default collate cannot stack them.
struct Ragged : data::Dataset {
  int64_t size() const override { return 6; }
  data::Example get(int64_t i) const override { return {full({1 + i % 3}, double(i) + 1), full({}, double(i), kI64)}; }
};

std::vector<int64_t> targets_of_epoch(data::DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> out;
  while (auto b = loader.next()) {
    for (double t : b->targets.to_vector()) out.push_back(static_cast<int64_t>(t));
  }
  return out;
}

}  // namespace

// Catches: samples dropped or repeated within an epoch, inputs and targets
// of different samples paired, the stacked batch's shape wrong.
TEST_CASE("a DataLoader over a user's Dataset stacks examples into batches", "[data][loader]") {
  Squares squares(10);
  data::DataLoader loader(squares, {.batch = 4, .shuffle = true, .seed = 3});
  CHECK(loader.batches_per_epoch() == 3);
  loader.start_epoch(0);
  std::vector<int64_t> seen;
  while (auto b = loader.next()) {
    CHECK(b->inputs.sizes() == Shape{b->targets.size(0), 2});
    const std::vector<double> in = b->inputs.to_vector(), tg = b->targets.to_vector();
    for (size_t i = 0; i < tg.size(); ++i) {
      CHECK(tg[i] == in[2 * i] * in[2 * i]);  // the target belongs to this input
      CHECK(in[2 * i + 1] == -in[2 * i]);
      seen.push_back(static_cast<int64_t>(in[2 * i]));
    }
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

// Catches: the collate function ignored, and the default collate padding or
// truncating silently instead of naming the mismatch.
TEST_CASE("a collate function builds batches the default cannot", "[data][loader]") {
  Ragged ragged;
  data::DataLoader plain(ragged, {.batch = 3, .shuffle = false, .prefetch = false});
  CHECK_THROWS_WITH(plain.next(), Contains("examples of different shapes") && Contains("collate function"));
  auto pad = [](const std::vector<data::Example>& examples) {
    int64_t longest = 0;
    for (const auto& e : examples) longest = std::max(longest, e.input.size(0));
    std::vector<Tensor> rows, targets;
    for (const auto& e : examples) {
      Tensor row = zeros({longest});
      copy_(row.narrow(0, 0, e.input.size(0)), e.input);
      rows.push_back(row);
      targets.push_back(e.target);
    }
    return data::Batch{stack(rows), stack(targets), 0};
  };
  data::DataLoader padded(ragged, {.batch = 3, .shuffle = false}, pad);
  const auto b = padded.next();
  REQUIRE(b.has_value());
  CHECK(b->inputs.to_vector() == std::vector<double>{1, 0, 0, 2, 2, 0, 3, 3, 3});
}

// Catches: a Generator given for shuffling ignored (every epoch the same
// order, or the (seed, epoch) order), and its state not advancing.
TEST_CASE("shuffling draws each epoch's order from a Generator", "[data][loader]") {
  Squares squares(32);
  Generator a(5), b(5), c(6);
  data::DataLoader la(squares, {.batch = 8, .prefetch = false, .generator = &a});
  data::DataLoader lb(squares, {.batch = 8, .prefetch = false, .generator = &b});
  data::DataLoader lc(squares, {.batch = 8, .prefetch = false, .generator = &c});
  const auto a0 = targets_of_epoch(la, 0), a1 = targets_of_epoch(la, 1);
  CHECK(a0 == targets_of_epoch(lb, 0));
  CHECK(a1 == targets_of_epoch(lb, 1));
  CHECK(a0 != a1);
  CHECK(a0 != targets_of_epoch(lc, 0));
}

// Catches: shards that overlap or leave samples out, for any Dataset.
TEST_CASE("sharded loaders over a user's Dataset split each epoch between ranks", "[data][loader][dist]") {
  Squares squares(12);
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    data::DataLoader shard(squares, {.batch = 2, .seed = 9, .shard_rank = rank, .shard_count = 3});
    const auto mine = targets_of_epoch(shard, 0);
    CHECK(mine.size() == 4);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::unique(all.begin(), all.end()) == all.end());
  CHECK(all.size() == 12);
}

namespace {
// The sample indices of a batch of Squares (input row i is [i, -i]).
std::vector<int64_t> samples_of(const data::Batch& b) {
  const std::vector<double> in = b.inputs.to_vector();
  std::vector<int64_t> out;
  for (size_t j = 0; j < in.size(); j += 2) out.push_back(static_cast<int64_t>(in[j]));
  return out;
}
}  // namespace

// Catches: a run resumed at another world size that trains some of the
// epoch's samples twice or never (the position counted one world's batches
// per rank), an epoch started at a sample that does not share out the rest
// of the order as a whole epoch does, and start_epoch(epoch, skip) drifting
// from the sample it stands for.
TEST_CASE("an epoch started at a sample continues where a run of another world size stopped",
          "[data][loader][dist]") {
  Squares squares(23);
  for (bool drop : {false, true}) {
    INFO("drop_uneven " << drop);
    // Two ranks train two batches of 3 each: the epoch's first 12 samples.
    std::vector<int64_t> before;
    int64_t position = -1;
    for (int64_t rank = 0; rank < 2; ++rank) {
      data::DataLoader mine(squares, {.batch = 3, .seed = 4, .prefetch = false, .shard_rank = rank, .shard_count = 2,
                                      .drop_uneven = drop});
      for (int b = 0; b < 2; ++b) {
        const auto batch = mine.next();
        REQUIRE(batch.has_value());
        for (int64_t i : samples_of(*batch)) before.push_back(i);
        if (b == 1) position = mine.samples_through(batch->index);
      }
    }
    CHECK(position == 12);
    // Three ranks take the epoch on from sample 12.
    std::vector<int64_t> after;
    for (int64_t rank = 0; rank < 3; ++rank) {
      data::DataLoader mine(squares, {.batch = 2, .seed = 4, .prefetch = false, .shard_rank = rank, .shard_count = 3,
                                      .drop_uneven = drop});
      mine.start_epoch_at_sample(0, position);
      CHECK(mine.first_batch() == 2);  // 12 samples are two batches of 3 x 2
      int64_t last = -1;
      while (auto batch = mine.next()) {
        for (int64_t i : samples_of(*batch)) after.push_back(i);
        last = batch->index;
      }
      CHECK(mine.samples_through(last) == 23);
    }
    // The first run's samples are the whole order's first 12 (one process at batch 12).
    data::DataLoader whole(squares, {.batch = 12, .seed = 4, .prefetch = false});
    std::vector<int64_t> expected_before = samples_of(*whole.next());
    std::sort(expected_before.begin(), expected_before.end());
    std::sort(before.begin(), before.end());
    CHECK(before == expected_before);
    // The rest: 11 samples, padded to 12 from the order's start, or 9 of them without the tail.
    CHECK(after.size() == (drop ? 9u : 12u));
    std::vector<int64_t> seen = before;
    seen.insert(seen.end(), after.begin(), after.end());
    std::sort(seen.begin(), seen.end());
    const auto distinct = std::unique(seen.begin(), seen.end()) - seen.begin();
    CHECK(distinct == (drop ? 21 : 23));  // nothing left out but the uneven tail, nothing repeated but the padding
  }
  // start_epoch(epoch, skip) is the epoch started at skip x batch x ranks.
  data::DataLoader skipped(squares, {.batch = 2, .seed = 4, .prefetch = false, .shard_rank = 1, .shard_count = 3});
  data::DataLoader at_sample(squares, {.batch = 2, .seed = 4, .prefetch = false, .shard_rank = 1, .shard_count = 3});
  skipped.start_epoch(1, 2);
  at_sample.start_epoch_at_sample(1, 12);
  CHECK(skipped.end_batch() == at_sample.end_batch());
  CHECK(skipped.end_batch() == skipped.batches_per_epoch());
  while (auto a = skipped.next()) {
    const auto b = at_sample.next();
    REQUIRE(b.has_value());
    CHECK(a->index == b->index);
    CHECK(samples_of(*a) == samples_of(*b));
  }
  CHECK_FALSE(at_sample.next().has_value());
  CHECK_THROWS_WITH(at_sample.start_epoch_at_sample(0, 24), Contains("cannot start at sample 24"));
  CHECK_THROWS_WITH(at_sample.start_epoch_at_sample(0, -1), Contains("cannot start at sample -1"));
  CHECK_THROWS_WITH(at_sample.start_epoch(0, -1), Contains("cannot skip"));
}

// Catches: prefetching that reads on the training thread (no overlap) or
// that changes which samples a batch holds.
TEST_CASE("prefetching prepares the next batch on a worker thread", "[data][loader]") {
  Squares with(16), without(16);
  data::DataLoader fast(with, {.batch = 4, .seed = 2, .prefetch = true});
  data::DataLoader slow(without, {.batch = 4, .seed = 2, .prefetch = false});
  CHECK(targets_of_epoch(fast, 0) == targets_of_epoch(slow, 0));
  CHECK(with.readers.size() >= 2);  // this thread for the first batch, a worker for the next
  CHECK(without.readers == std::set<std::thread::id>{std::this_thread::get_id()});
}

// Catches: TensorDataset's fast gather reading past its rows, and get(i)
// disagreeing with the batch gather.
TEST_CASE("TensorDataset is a Dataset: get and get_batch agree", "[data][loader]") {
  data::TensorDataset d = data::synthetic_images(8, 2, 4, 4, 1);
  const int64_t picks[] = {5, 0, 5};
  const data::Batch b = d.get_batch(picks);
  CHECK(b.inputs.select(0, 0).to_vector() == d.get(5).input.to_vector());
  CHECK(b.targets.to_vector()[1] == d.get(0).target.item<double>());
  const int64_t outside[] = {8};
  CHECK_THROWS_WITH(d.get_batch(outside), Contains("sample 8 is out of range for 8 samples"));
  CHECK_THROWS_WITH(d.get(-1), Contains("out of range"));
}
