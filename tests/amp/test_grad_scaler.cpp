// GradScaler: loss scaling rescues f16 gradients, skips on inf without a host
// sync, follows PyTorch's scale trajectory, and rejects misuse.
#include <catch2/catch.hpp>
#include <cmath>

#include "kernels/amp/amp.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using amp::Autocast;
using amp::GradScaler;
using Catch::Contains;

namespace {

// A linear regression whose gradients are ~1e-8: the loss carries a 1e-8 factor.
struct TinyGradientProblem {
  Tensor x, target, w;
  static constexpr double kTiny = 1e-8;

  TinyGradientProblem(uint64_t seed, Device device) {
    Generator gen(seed);
    x = randn({16, 8}, kF32, kCPU, &gen);
    target = matmul(x, randn({8, 4}, kF32, kCPU, &gen)).to(device);
    x = x.to(device);
    w = zeros({4, 8}, kF32, device).requires_grad_();
  }
  Tensor loss() const { return mul(mse_loss(linear(x, w), target), kTiny); }
  double true_loss() const {
    NoGradGuard no_grad;
    return mse_loss(linear(x, w), target).item<double>();
  }
};

enum class Mode { Fp32, Fp16NoScaler, Fp16Scaler };

std::vector<double> train_tiny(Mode mode, int steps, Device device) {
  TinyGradientProblem p(7, device);
  optim::SGD sgd({p.w}, {.lr = 0.05 / TinyGradientProblem::kTiny});
  GradScaler scaler({.enabled = mode == Mode::Fp16Scaler});
  std::vector<double> losses{p.true_loss()};
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    {
      Autocast guard(device, kF16, /*enabled=*/mode != Mode::Fp32);
      const Tensor loss = p.loss();
      scaler.scale(loss).backward();
    }
    scaler.step(sgd);
    scaler.update();
    losses.push_back(p.true_loss());
  }
  return losses;
}

}  // namespace

// Each AMP scenario runs on the CPU and through the CUDA kernels: on the GPU
// when there is one, else on the sim device.
const Device kAmpDevices[] = {kCPU, test::kCudaPath};

TEST_CASE("tiny gradients: f32 trains, f16 without scaling stalls, GradScaler rescues it", "[scaler][underflow]") {
  for (Device device : kAmpDevices) {
    INFO("device " << device.str());
    const auto fp32 = train_tiny(Mode::Fp32, 30, device);
    const auto fp16 = train_tiny(Mode::Fp16NoScaler, 30, device);
    const auto scaled = train_tiny(Mode::Fp16Scaler, 30, device);
    INFO("f32 " << fp32.front() << " -> " << fp32.back() << "; f16 " << fp16.front() << " -> " << fp16.back()
                << "; f16+scaler " << scaled.front() << " -> " << scaled.back());
    CHECK(fp32.back() < 0.2 * fp32.front());
    CHECK(fp16.back() == fp16.front());  // every gradient flushed to zero in f16: not one update
    CHECK(scaled.back() < 0.2 * scaled.front());
    CHECK(scaled.back() == Approx(fp32.back()).epsilon(0.1));
  }
}

TEST_CASE("an injected inf skips the step on the device, halves the scale and resets the tracker", "[scaler]") {
  for (Device device : kAmpDevices) {
    INFO("device " << device.str());
    Generator gen(1);
    Tensor w = randn({3, 4}, kF32, device, &gen).requires_grad_();
    const Tensor x = randn({5, 4}, kF32, device, &gen);
    optim::AdamW opt({w}, {.lr = 1e-2});
    GradScaler scaler({.growth_interval = 3});
    auto iteration = [&](bool inject_inf) {
      opt.zero_grad();
      scaler.scale(sum(square(linear(x, w)))).backward();
      if (inject_inf) {
        NoGradGuard no_grad;
        copy_(w.grad().flatten().narrow(0, 5, 1), full({1}, INFINITY, kF32, device));  // works on any device
      }
      const auto outcome = scaler.step(opt);
      scaler.update();
      return outcome;
    };
    CHECK(!iteration(false).skipped());
    CHECK(scaler.get_scale() == 65536.0);
    CHECK(scaler.growth_tracker().item<int>() == 1);

    const auto before = opt.state_dict();
    const auto w_before = w.to_vector();
    const auto outcome = iteration(true);
    CHECK(outcome.skipped());
    CHECK(w.to_vector() == w_before);  // bit-identical weights
    const auto after = opt.state_dict();
    for (const auto& [key, value] : before) {
      INFO(key);
      CHECK(after.at(key).to_vector() == value.to_vector());  // moments and step count untouched
    }
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.growth_tracker().item<int>() == 0);

    // growth_interval clean steps double the scale.
    for (int i = 0; i < 3; ++i) CHECK(!iteration(false).skipped());
    CHECK(scaler.get_scale() == 65536.0);
    CHECK(scaler.growth_tracker().item<int>() == 0);
  }
}

// Bug caught: --explain-skips naming the wrong layer (flags out of step
// with the parameter list) or flags left from an earlier step.
TEST_CASE("track_nonfinite_gradients flags which parameters' gradients held the inf", "[scaler][explain]") {
  for (Device device : kAmpDevices) {
    INFO("device " << device.str());
    Generator gen(2);
    Tensor a = randn({3, 4}, kF32, device, &gen).requires_grad_();
    Tensor b = randn({3}, kF32, device, &gen).requires_grad_();
    Tensor c = randn({2, 3}, kF32, device, &gen).requires_grad_();
    Tensor unused = randn({7}, kF32, device, &gen).requires_grad_();  // never gets a gradient
    const Tensor x = randn({5, 4}, kF32, device, &gen);
    optim::SGD opt({a, unused, b, c}, {.lr = 1e-2});
    GradScaler scaler;
    CHECK_THROWS_WITH(scaler.nonfinite_gradients(opt), Contains("track_nonfinite_gradients(true)"));
    scaler.track_nonfinite_gradients(true);
    auto step = [&](bool inject) {
      opt.zero_grad();
      scaler.scale(sum(linear(relu(linear(x, a, b)), c))).backward();
      if (inject) {
        NoGradGuard no_grad;
        copy_(b.grad().narrow(0, 2, 1), full({1}, NAN, kF32, device));
      }
      CHECK(scaler.step(opt).skipped() == inject);
      const GradScaler::NonfiniteGradients flagged = scaler.nonfinite_gradients(opt);
      scaler.update();
      return flagged;
    };
    // A parameter without a gradient keeps its slot: b's flag is still b's.
    const auto poisoned = step(true);
    REQUIRE(poisoned.parameters.size() == 4);
    CHECK(poisoned.parameters[2].impl() == b.impl());
    CHECK(poisoned.flags.to(kCPU).to_vector() == std::vector<double>{0, 0, 1, 0});
    CHECK(step(false).flags.to(kCPU).to_vector() == std::vector<double>{0, 0, 0, 0});
  }
}

TEST_CASE("a scripted found_inf sequence reproduces PyTorch's scale trajectory", "[scaler]") {
  // PyTorch's documented update rule, written out on the host as the reference.
  struct Reference {
    double scale = 65536.0;
    int tracker = 0;
    void update(bool found_inf, double growth, double backoff, int interval) {
      if (found_inf) {
        scale *= backoff;
        tracker = 0;
      } else if (++tracker == interval) {
        if (std::isfinite(static_cast<float>(scale * growth))) scale *= growth;
        tracker = 0;
      }
    }
  };
  const std::vector<int> script = {0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  for (Device device : kAmpDevices) {
    INFO("device " << device.str());
    Reference ref;
    const Tensor scale = full({1}, 65536.0, kF32, device), tracker = zeros({1}, kI32, device);
    for (int f : script) {
      ref.update(f != 0, 2.0, 0.5, 4);
      kernels::update_scale(scale, tracker, full({1}, f, kF32, device), {2.0, 0.5, 4});
      REQUIRE(scale.item<double>() == ref.scale);
      REQUIRE(tracker.item<int>() == ref.tracker);
    }
  }
  // Growth stops short of inf: f32's largest power of two stays put.
  const Tensor big = full({1}, std::ldexp(1.0, 127)), t = zeros({1}, kI32);
  kernels::update_scale(big, t, zeros({1}), {2.0, 0.5, 1});
  CHECK(big.item<double>() == std::ldexp(1.0, 127));
}

TEST_CASE("misuse of the READY -> UNSCALED -> STEPPED sequence is an error", "[scaler]") {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  GradScaler scaler;
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Contains("no loss was scaled"));
  scaler.scale(sum(w)).backward();
  REQUIRE_THROWS_WITH(optim::clip_grad_norm_({w}, 1.0),
                      Contains("still multiplied by the loss scale") && Contains("unscale_"));
  REQUIRE_THROWS_WITH(scaler.update(), Contains("no inf checks were recorded"));
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector() == std::vector<double>{1.0, 1.0});  // unscaled in place
  CHECK_NOTHROW(optim::clip_grad_norm_({w}, 1.0));
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Contains("already called on this optimizer"));
  scaler.step(opt);
  REQUIRE_THROWS_WITH(scaler.step(opt), Contains("already called"));
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Contains("after step()"));
  scaler.update();
  // After update() the cycle starts again.
  opt.zero_grad();
  scaler.scale(sum(w)).backward();
  CHECK_NOTHROW(scaler.step(opt));
  scaler.update();
}

TEST_CASE("unscaling f16 gradients is refused with advice, master-weight optimizers unscale in f32", "[scaler]") {
  Tensor w = ones({4}, kF16).requires_grad_();
  optim::SGD opt({w}, {.lr = 1.0}, {.master_weights = true});
  // 65536 itself overflows an f16 loss (its largest value is 65504): start lower.
  GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(sum(mul(w, 1e-3))).backward();  // f16 grads of 1e-3 * 1024
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Contains("f16 gradients") && Contains("master weights"));
  const auto outcome = scaler.step(opt);  // fused: the kernel multiplies by 1/scale in f32
  scaler.update();
  CHECK(!outcome.skipped());
  CHECK(opt.master_of(w).to_vector()[0] == Approx(1.0 - 1e-3).epsilon(1e-3));
}

TEST_CASE("a disabled scaler costs nothing and changes nothing (bf16 needs none)", "[scaler]") {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.5});
  GradScaler scaler({.enabled = false});
  const Tensor loss = sum(w);
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  CHECK(!scaler.step(opt).skipped());
  scaler.update();
  CHECK(w.to_vector() == std::vector<double>{0.5, 0.5});
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
}

TEST_CASE("scale bounds clamp the trajectory when asked", "[scaler]") {
  const Tensor scale = full({1}, 4.0), tracker = zeros({1}, kI32);
  kernels::update_scale(scale, tracker, ones({1}), {2.0, 0.5, 10, /*min=*/3.0, 0});
  CHECK(scale.item<double>() == 3.0);
  kernels::update_scale(scale, tracker, zeros({1}), {2.0, 0.5, 1, 0, /*max=*/5.0});
  CHECK(scale.item<double>() == 5.0);
}

TEST_CASE("a loaded scaler state moves to the device of the first scaled loss", "[scaler]") {
  // A checkpoint is read on the CPU; the run it resumes may scale losses on a GPU (here: sim).
  GradScaler saved;
  saved.scale(ones({1}, kF32));
  kernels::update_scale(saved.scale_tensor(), zeros({1}, kI32), ones({1}), {2.0, 0.5, 2000, 0, 0});
  optim::StateDict state = saved.state_dict();
  state["growth_tracker"] = full({1}, 7.0, kI32);
  GradScaler resumed;
  resumed.load_state_dict(state);
  CHECK(resumed.get_scale() == 32768.0);
  const Tensor scaled = resumed.scale(full({1}, 2.0, kF32, kSIM));
  CHECK(resumed.scale_tensor().device() == kSIM);
  CHECK(scaled.item<double>() == 65536.0);
  CHECK(resumed.state_dict().at("growth_tracker").item<double>() == 7.0);
  // Loading into a scaler whose state already exists copies across devices.
  resumed.load_state_dict(saved.state_dict());
  CHECK(resumed.scale_tensor().device() == kSIM);
  CHECK(resumed.get_scale() == 32768.0);
}

// Catches (mutant: the optimizer ignores the unscale factor): AdamW is nearly
// invariant to a constant gradient scale, so an AMP training test still
// passes with that bug. Here eps (1e-3) dominates sqrt(v) for the true
// gradients (1e-5) but not for the 65536x scaled ones, so the update depends
// on the unscale factor by ~100x; SGD depends on it linearly. Both the fused
// path (step() without unscale_) and the unscale_ + clip path are checked
// against the same optimizer fed the true gradients, on the CPU and on sim.
TEST_CASE("the optimizer step under a GradScaler uses the unscaled gradients", "[scaler][mutant]") {
  for (Device device : {kCPU, kSIM}) {
    for (bool explicit_unscale : {false, true}) {
      for (bool use_sgd : {false, true}) {
        INFO(device.str() << (explicit_unscale ? " unscale_+clip" : " fused") << (use_sgd ? " sgd" : " adamw"));
        auto make = [&](const Tensor& p) -> std::unique_ptr<optim::Optimizer> {
          if (use_sgd) return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SgdOptions{.lr = 0.1});
          return std::make_unique<optim::AdamW>(std::vector<Tensor>{p},
                                                optim::AdamWOptions{.lr = 0.1, .eps = 1e-3, .weight_decay = 0});
        };
        const Tensor grad = full({4}, 1e-5, kF32, device);
        Tensor scaled_p = ones({4}, kF32, device).requires_grad_();
        Tensor plain_p = ones({4}, kF32, device).requires_grad_();
        auto scaled_opt = make(scaled_p);
        auto plain_opt = make(plain_p);
        GradScaler scaler;
        scaler.scale(sum(mul(scaled_p, grad))).backward();  // grad = 65536 * 1e-5
        if (explicit_unscale) {
          scaler.unscale_(*scaled_opt);
          optim::clip_grad_norm_({scaled_p}, 1.0);  // a no-op at this norm, but only correct after unscale_
        }
        scaler.step(*scaled_opt);
        scaler.update();
        sum(mul(plain_p, grad)).backward();
        plain_opt->step();
        const auto got = scaled_p.to(kCPU).to_vector(), want = plain_p.to(kCPU).to_vector();
        for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
        CHECK(want[0] < 1.0);  // the step moved the weights at all
      }
    }
  }
}
