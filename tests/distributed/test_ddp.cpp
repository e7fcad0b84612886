// DistributedDataParallel against one process training on the whole batch.
// Every rank also trains the single-process reference itself (no
// collectives), so each rank can compare its DDP parameters with it.
#include "distributed/dist_test_util.h"

using namespace mt;
using namespace mt::dist_test;
using Catch::Contains;

// The bugs: gradients summed but not divided by the world size (twice the
// step), a rank reducing its own gradient only, buckets reduced before their
// last gradient arrived, or rank 0's initial weights not broadcast. Each
// makes the parameters leave the single-process run's within a few steps.
TEST_CASE("DDP with W ranks of batch B follows one process with batch W x B", "[dist][ddp]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int steps = 6;
  const Data data = make_data(steps * w * kPerRank);
  for (bool as_view : {false, true}) {
    for (Mode mode : {Mode::Fp32, Mode::Fp16, Mode::Bf16}) {
      INFO(mode_name(mode) << (as_view ? ", gradient_as_bucket_view" : ""));
      Trainer reference(mode, 7);
      Trainer distributed(mode, 7 + static_cast<uint64_t>(r));  // other ranks start elsewhere: DDP broadcasts rank 0's
      dist::DistributedDataParallel ddp(
          distributed.net, {.bucket_bytes = 1024, .first_bucket_bytes = 700, .gradient_as_bucket_view = as_view});
      CHECK(ddp.bucket_sizes().size() > 2);  // several buckets, so their order matters
      bool in_buckets = true;
      train_side_by_side(reference, data, steps, [&](const Tensor& x, const Tensor& y) {
        distributed.backward(ddp, x, y);
        in_buckets = in_buckets && grads_live_in_buckets(*distributed.net, ddp);
        distributed.step();
      });
      CHECK(in_buckets == as_view);
      const double difference = max_relative_difference(*reference.net, *distributed.net);
      UNSCOPED_INFO(mode_name(mode) << (as_view ? " (views)" : "") << " world " << w
                                    << ": max relative parameter difference " << difference);
      CHECK(difference <= tolerance(mode));
      CHECK(same_on_every_rank(*distributed.net));
      if (mode == Mode::Fp16) CHECK(reference.scaler->get_scale() == distributed.scaler->get_scale());
    }
  }
}

// The bug: a no_sync() that still all-reduces (K times the traffic), or one
// that drops the accumulated micro-batches and reduces only the last.
TEST_CASE("no_sync accumulates K micro-batches locally and reduces once", "[dist][ddp]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int steps = 3, k = 3;
  const Data data = make_data(steps * k * w * kPerRank);
  for (bool as_view : {false, true}) {
    INFO((as_view ? "gradient_as_bucket_view" : "copies"));
    Trainer reference(Mode::Fp32, 11), distributed(Mode::Fp32, 11);
    dist::DistributedDataParallel ddp(distributed.net, {.gradient_as_bucket_view = as_view});
    for (int s = 0; s < steps; ++s) {
      const int64_t first = s * k * w * kPerRank;
      reference.backward(*reference.net, rows(data, first, k * w * kPerRank).inputs,
                         rows(data, first, k * w * kPerRank).targets);
      reference.step();
      for (int m = 0; m < k; ++m) {
        const Data mine = rows(data, first + (m * w + r) * kPerRank, kPerRank);
        const int64_t before = ddp.buckets_reduced();
        if (m < k - 1) {
          auto guard = ddp.no_sync();
          distributed.backward(ddp, mine.inputs, mine.targets, k);
          CHECK(ddp.buckets_reduced() == before);
        } else {
          distributed.backward(ddp, mine.inputs, mine.targets, k);
          CHECK(ddp.buckets_reduced() == before + static_cast<int64_t>(ddp.bucket_sizes().size()));
        }
      }
      distributed.step();
    }
    const double difference = max_relative_difference(*reference.net, *distributed.net);
    UNSCOPED_INFO("no_sync K=3" << (as_view ? " (views)" : "") << " world " << w
                                << ": max relative parameter difference " << difference);
    CHECK(difference <= tolerance(Mode::Fp32));
  }
}

// The bug: a parameter that only the micro-batches under no_sync() reached
// (a skip connection used on some batches) counted as zeros in the reducing
// backward, so its accumulated gradient was thrown away on every rank.
TEST_CASE("a gradient accumulated under no_sync is reduced even if the last micro-batch misses it", "[dist][ddp]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const int steps = 3;
  const Data data = make_data(steps * 2 * w * kPerRank);
  for (bool as_view : {false, true}) {
    INFO((as_view ? "gradient_as_bucket_view" : "copies"));
    Trainer reference(Mode::Fp32, 13, /*with_skip=*/true), distributed(Mode::Fp32, 13, /*with_skip=*/true);
    dist::DistributedDataParallel ddp(distributed.net, {.gradient_as_bucket_view = as_view});
    for (int s = 0; s < steps; ++s) {
      for (int m = 0; m < 2; ++m) {  // the skip joins the first micro-batch only
        const int64_t first = (2 * s + m) * w * kPerRank;
        reference.net->use_skip = distributed.net->use_skip = m == 0;
        reference.backward(*reference.net, rows(data, first, w * kPerRank).inputs,
                           rows(data, first, w * kPerRank).targets, 2);
        const Data mine = rows(data, first + r * kPerRank, kPerRank);
        if (m == 0) {
          auto guard = ddp.no_sync();
          distributed.backward(ddp, mine.inputs, mine.targets, 2);
        } else {
          distributed.backward(ddp, mine.inputs, mine.targets, 2);
        }
      }
      reference.step();
      distributed.step();
    }
    const double difference = max_relative_difference(*reference.net, *distributed.net);
    UNSCOPED_INFO("skip under no_sync" << (as_view ? " (views)" : "") << " world " << w
                                       << ": max relative parameter difference " << difference);
    CHECK(difference <= tolerance(Mode::Fp32));
    CHECK(same_on_every_rank(*distributed.net));
  }
}

// The bug this design rules out: ranks that decide on their own whether a
// step overflowed. Rank 1 alone sees an overflowing batch; after the f32
// all-reduce every rank holds its inf, so every rank skips, halves the scale
// and keeps the same weights (a rank that stepped would diverge for good).
TEST_CASE("an inf on one rank makes every rank skip the step and keep equal scales", "[dist][ddp]") {
  auto& world = dist::world();
  const int r = world.rank(), w = world.size();
  const Data data = make_data(4 * w * kPerRank);
  Trainer t(Mode::Fp16, 3);
  dist::DistributedDataParallel ddp(t.net);
  std::vector<bool> skipped;
  for (int s = 0; s < 4; ++s) {
    Data mine = rows(data, (s * w + r) * kPerRank, kPerRank);
    if (s == 2 && r == w - 1) mine.inputs = mul(mine.inputs, 1e5);  // overflows f16 in fc1 on this rank only
    t.backward(ddp, mine.inputs, mine.targets);
    skipped.push_back(t.step());
  }
  CHECK(skipped == std::vector<bool>{false, false, w > 1 || r == w - 1, false});
  Tensor scale = full({1}, t.scaler->get_scale(), kF64);
  Tensor all = empty({w}, kF64);
  world.all_gather(all, scale)->wait();
  for (double s : all.to_vector()) CHECK(s == 32768.0);  // 65536 halved once, on every rank
  CHECK(same_on_every_rank(*t.net));
}

TEST_CASE("DDP buckets parameters in reverse order, the first bucket small", "[dist][ddp]") {
  manual_seed(0);
  auto net = std::make_shared<Net>();
  // fc2.bias 5, fc2.weight 160, fc1.bias 32, fc1.weight 384 floats
  dist::DistributedDataParallel ddp(net, {.bucket_bytes = 4 * 400, .first_bucket_bytes = 4 * 10});
  const auto buckets = ddp.bucket_parameters();
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0] == std::vector<std::string>{"fc2.bias"});
  CHECK(buckets[1] == std::vector<std::string>{"fc2.weight", "fc1.bias"});
  CHECK(buckets[2] == std::vector<std::string>{"fc1.weight"});  // bigger than the cap: a bucket of its own
  CHECK(ddp.bucket_sizes() == std::vector<int64_t>{4 * 5, 4 * (160 + 32), 4 * 384});
  CHECK(ddp.named_parameters().front().first == "module.fc1.weight");  // PyTorch's names under DDP
}

// The bug: a parameter no gradient reaches would keep its bucket from ever
// starting (a hang), or leave its .grad undefined on one rank and defined on another.
TEST_CASE("a parameter without a gradient counts as zeros and never holds the buckets back", "[dist][ddp]") {
  auto& world = dist::world();
  manual_seed(5);
  auto net = std::make_shared<Net>(/*with_unused=*/true);
  dist::DistributedDataParallel ddp(net, {.bucket_bytes = 256, .first_bucket_bytes = 64});
  const Data d = make_data(kPerRank);
  sum(ddp.forward(d.inputs)).backward();
  REQUIRE(net->unused->weight.grad().defined());
  for (double g : net->unused->weight.grad().to_vector()) CHECK(g == 0.0);
  CHECK(net->fc1->weight.grad().defined());
  CHECK(world.size() >= 1);
}

// The bug: ranks that built different models (another --model, a flag read
// differently) would broadcast tensors of different sizes into each other
// or hang; DDP refuses on every rank before any of that.
TEST_CASE("DDP refuses, on every rank, ranks that built different models", "[dist][ddp]") {
  auto& world = dist::world();
  if (world.size() < 2) return;  // a world of one cannot disagree
  manual_seed(0);
  auto net = std::make_shared<Net>(/*with_unused=*/world.rank() == 1);
  CHECK_THROWS_WITH(dist::DistributedDataParallel(net), Contains("every rank must build the same model"));
  world.barrier();  // and the group still works
}
