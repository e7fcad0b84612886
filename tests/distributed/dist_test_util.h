// What the distributed tests share: a small net, data every rank can make
// alike, and comparisons of parameters with a reference or across ranks.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>

#include "distributed/ddp.h"
#include "mixtape.h"
#include "nn/layers.h"

namespace mt::dist_test {

struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, unused, skip;
  bool use_skip = true;  // the skip connection, when there is one, joins only while this is set
  explicit Net(bool with_unused = false, bool with_skip = false) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(12, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 5));
    if (with_unused) unused = register_module("unused", std::make_shared<nn::Linear>(3, 3));
    if (with_skip) skip = register_module("skip", std::make_shared<nn::Linear>(12, 5));
  }
  Tensor forward(const Tensor& x) override {
    Tensor out = fc2->forward(relu(fc1->forward(x)));
    return skip && use_skip ? add(out, skip->forward(x)) : out;
  }
};

enum class Mode { Fp32, Fp16, Bf16 };

inline constexpr int64_t kPerRank = 8;  // samples per rank and micro-batch

struct Data {
  Tensor inputs, targets;
};

// The same data on every rank: `samples` rows.
inline Data make_data(int64_t samples) {
  Generator gen(1234);
  Data d{randn({samples, 12}, kF32, kCPU, &gen), empty({samples}, kI64)};
  const std::vector<double> u = rand({samples}, kF32, kCPU, &gen).to_vector();
  std::vector<int64_t> t;
  for (double x : u) t.push_back(static_cast<int64_t>(x * 5) % 5);
  d.targets = from_vector(t, {samples});
  return d;
}

struct Trainer {
  std::shared_ptr<Net> net;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  Mode mode;

  Trainer(Mode m, uint64_t seed, bool with_skip = false) : mode(m) {
    manual_seed(seed);
    net = std::make_shared<Net>(/*with_unused=*/false, with_skip);
    // SGD, not Adam: Adam's update does not change when every gradient is
    // doubled, so it would hide a DDP that forgets to divide by the world size.
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    scaler = std::make_unique<amp::GradScaler>(
        amp::GradScalerOptions{.enabled = m == Mode::Fp16, .collapse_check_interval = 0});
  }
  // One micro-batch's forward and backward through `model` (the net or its DDP wrapper).
  void backward(nn::Module& model, const Tensor& x, const Tensor& y, double divide = 1) {
    Tensor loss;
    {
      amp::Autocast ac(kCPU, mode == Mode::Bf16 ? kBF16 : kF16, mode != Mode::Fp32);
      loss = cross_entropy(model.forward(x), y);
    }
    if (divide != 1) loss = div(loss, divide);
    scaler->scale(loss).backward();
  }
  bool step() {
    const amp::StepOutcome outcome = scaler->step(*opt);
    scaler->update();
    opt->zero_grad();
    return outcome.found_inf().defined() && outcome.skipped();
  }
};

// Rows [first, first + n) of d.
inline Data rows(const Data& d, int64_t first, int64_t n) {
  return {d.inputs.narrow(0, first, n), d.targets.narrow(0, first, n)};
}

inline double max_relative_difference(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<double> x = pa[i].to_vector(), y = pb[i].to_vector();
    double scale = 0;
    for (double v : x) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < x.size(); ++j) worst = std::max(worst, std::abs(x[j] - y[j]) / scale);
  }
  return worst;
}

// True when every rank holds bit-identical parameters.
inline bool same_on_every_rank(const nn::Module& m) {
  auto& world = dist::world();
  for (const Tensor& p : m.parameters()) {
    Tensor all = empty({world.size() * p.numel()}, p.dtype());
    world.all_gather(all, p.contiguous())->wait();
    const std::vector<double> v = all.to_vector();
    for (int r = 1; r < world.size(); ++r) {
      for (int64_t j = 0; j < p.numel(); ++j) {
        if (v[static_cast<size_t>(r * p.numel() + j)] != v[static_cast<size_t>(j)]) return false;
      }
    }
  }
  return true;
}

// The tolerance each precision is held to (parameters after the steps, max
// |difference| / max |parameter| per tensor): the ranks sum their halves of
// the batch in another order than one process does, and under f16/bf16
// autocast each half's weight gradient is rounded to the low dtype before
// the f32 all-reduce. Measured with 2 and 3 ranks over 6 SGD steps: fp32
// 0.9e-7 / 2.5e-7, fp16 4.6e-4 / 6.0e-4, bf16 1.9e-3 / 4.7e-3 (bf16's ulp
// is 3.9e-3); the bounds leave about 2x room.
inline double tolerance(Mode m) { return m == Mode::Fp32 ? 1e-6 : m == Mode::Fp16 ? 2e-3 : 1e-2; }

inline const char* mode_name(Mode m) { return m == Mode::Fp32 ? "fp32" : m == Mode::Fp16 ? "fp16" : "bf16"; }

// True when, in every DDP bucket of several parameters (there must be one),
// the parameters' .grads are views of one storage, the bucket's
// (gradient_as_bucket_view), not tensors of their own.
inline bool grads_live_in_buckets(nn::Module& net, const dist::DistributedDataParallel& ddp) {
  const auto named = net.named_parameters();
  int shared_buckets = 0;
  for (const auto& bucket : ddp.bucket_parameters()) {
    if (bucket.size() < 2) continue;
    ++shared_buckets;
    std::shared_ptr<Storage> storage;
    for (const std::string& name : bucket) {
      const auto it = std::find_if(named.begin(), named.end(), [&](const auto& np) { return np.first == name; });
      const Tensor grad = it->second.grad();
      if (!grad.defined() || (storage && grad.storage() != storage)) return false;
      storage = grad.storage();
    }
  }
  return shared_buckets > 0;
}

// Trains `steps` steps of `reference` on the whole batches of W x kPerRank
// rows, and, through `train_mine(inputs, targets)` (one backward and step),
// this rank's kPerRank rows of each: the side-by-side run the equivalence
// tests compare.
template <typename TrainMine>
void train_side_by_side(Trainer& reference, const Data& data, int steps, TrainMine&& train_mine) {
  const int r = dist::world().rank(), w = dist::world().size();
  for (int s = 0; s < steps; ++s) {
    const Data global = rows(data, s * w * kPerRank, w * kPerRank);
    reference.backward(*reference.net, global.inputs, global.targets);
    reference.step();
    const Data mine = rows(data, s * w * kPerRank + r * kPerRank, kPerRank);
    train_mine(mine.inputs, mine.targets);
  }
}

}  // namespace mt::dist_test
