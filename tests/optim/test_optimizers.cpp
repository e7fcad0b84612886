// SGD and AdamW against their formulas, param groups, the three precision
// modes, stochastic rounding, and clip_grad_norm_.
#include <catch2/catch.hpp>
#include <cmath>

#include "mixtape.h"
#include "optim/lr_scheduler.h"

using namespace mt;

namespace {
void set_grad(const Tensor& p, const std::vector<double>& g) { p.set_grad(from_vector(g, p.sizes(), p.dtype())); }
}  // namespace

TEST_CASE("AdamW follows PyTorch's update for three steps", "[optim]") {
  Tensor p = from_vector(std::vector<double>{1.0, -2.0}, {2}).requires_grad_();
  optim::AdamW opt({p}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  double w[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double grads[3][2] = {{0.5, -1.0}, {0.25, 2.0}, {-1.0, 0.0}};
  for (int t = 1; t <= 3; ++t) {
    set_grad(p, {grads[t - 1][0], grads[t - 1][1]});
    opt.step();
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][i];
      w[i] *= 1 - 0.1 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.99 * v[i] + 0.01 * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8;
      w[i] -= 0.1 / (1 - std::pow(0.9, t)) * m[i] / denom;
    }
    const auto got = p.to_vector();
    CHECK(got[0] == Approx(w[0]).epsilon(1e-6));
    CHECK(got[1] == Approx(w[1]).epsilon(1e-6));
  }
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 3.0);
}

TEST_CASE("SGD with momentum, nesterov and weight decay", "[optim]") {
  for (bool nesterov : {false, true}) {
    Tensor p = from_vector(std::vector<double>{1.0}, {1}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov});
    double w = 1.0, buf = 0;
    for (int t = 0; t < 4; ++t) {
      const double g0 = 0.5 + t;
      set_grad(p, {g0});
      opt.step();
      const double g = g0 + 0.01 * w;
      buf = t == 0 ? g : 0.9 * buf + g;
      w -= 0.1 * (nesterov ? g + 0.9 * buf : buf);
      CHECK(p.item<double>() == Approx(w).epsilon(1e-5).margin(1e-7));  // f32 arithmetic vs f64 reference
    }
  }
}

TEST_CASE("param groups carry their own lr and weight decay, params without grads are skipped", "[optim]") {
  Tensor a = ones({1}).requires_grad_(), b = ones({1}).requires_grad_(), c = ones({1}).requires_grad_();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, 0.1, 0.0}, {{b, c}, 1.0, 0.5}}, {});
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  opt.step();
  CHECK(a.item<double>() == Approx(0.9));
  CHECK(b.item<double>() == Approx(1.0 - 1.0 * (1.0 + 0.5)));
  CHECK(c.item<double>() == 1.0);
  opt.zero_grad();
  CHECK(!a.grad().defined());
  REQUIRE_THROWS_WITH(optim::SGD({zeros({2}, kI64)}, {}), Catch::Contains("floating-point"));
}

// A PyTorch habit: groups that only split the parameters, the hyper-
// parameters given once to the optimizer. A group without its own lr used
// to get 1e-3 whatever the options said (AdamWOptions{.lr = 3e-3} ignored).
TEST_CASE("a param group without lr or weight decay takes the optimizer's options (silently-ignored-options bug)",
          "[optim]") {
  const auto one_step = [](bool grouped, bool adamw) {
    Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (adamw) {
      const optim::AdamWOptions options{.lr = 3e-3, .weight_decay = 0.2};
      opt = grouped ? std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{{{a}}, {{b}, 0.5}}, options)
                    : std::make_unique<optim::AdamW>(std::vector<Tensor>{a}, options);
    } else {
      const optim::SgdOptions options{.lr = 3e-3, .weight_decay = 0.2};
      opt = grouped ? std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{{{a}}, {{b}, 0.5}}, options)
                    : std::make_unique<optim::SGD>(std::vector<Tensor>{a}, options);
    }
    set_grad(a, {0.5, -2.0});
    set_grad(b, {0.5, -2.0});
    opt->step();
    if (grouped) {
      CHECK(*opt->param_groups()[0].lr == 3e-3);
      CHECK(*opt->param_groups()[0].weight_decay == 0.2);
      CHECK(*opt->param_groups()[1].lr == 0.5);  // its own lr, the optimizer's weight decay
      CHECK(*opt->param_groups()[1].weight_decay == 0.2);
    }
    return a.to_vector();
  };
  for (const bool adamw : {true, false}) {
    INFO((adamw ? "AdamW" : "SGD"));
    CHECK(one_step(true, adamw) == one_step(false, adamw));
  }
}

TEST_CASE("master weights keep updates that f16 parameters alone would lose", "[optim][precision]") {
  // Adding 1e-4 to 1.0 is below half an f16 ulp (4.9e-4): pure f16 never moves.
  Tensor with_master = ones({4}, kF16).requires_grad_();
  Tensor pure = ones({4}, kF16).requires_grad_();
  optim::SGD sgd_master({with_master}, {.lr = 1e-4}, {.master_weights = true});
  optim::SGD sgd_pure({pure}, {.lr = 1e-4});
  for (int i = 0; i < 100; ++i) {
    set_grad(with_master, {-1, -1, -1, -1});
    set_grad(pure, {-1, -1, -1, -1});
    sgd_master.step();
    sgd_pure.step();
  }
  CHECK(pure.to_vector()[0] == 1.0);                                                      // mode (c): stuck
  CHECK(sgd_master.master_of(with_master).to_vector()[0] == Approx(1.01).epsilon(1e-4));  // f32 master moved
  CHECK(with_master.to_vector()[0] == Approx(1.01).epsilon(1e-3));                        // and the f16 copy follows it
  CHECK(with_master.dtype() == kF16);
  CHECK(sgd_master.master_of(with_master).dtype() == kF32);
  CHECK(sgd_master.state_dict().count("state.0.master") == 1);
}

TEST_CASE("AdamW state dtypes follow the precision mode", "[optim][precision]") {
  Tensor f16_master = ones({2}, kF16).requires_grad_();
  Tensor bf16_pure = ones({2}, kBF16).requires_grad_();
  optim::AdamW a({f16_master}, {}, {.master_weights = true});
  optim::AdamW b({bf16_pure}, {});
  set_grad(f16_master, {1, 1});
  set_grad(bf16_pure, {1, 1});
  a.step();
  b.step();
  CHECK(a.state_dict().at("state.0.exp_avg").dtype() == kF32);
  CHECK(b.state_dict().at("state.0.exp_avg").dtype() == kBF16);
}

// Catches: a pure low-precision optimizer (f16/bf16 parameters, no master
// weights, state in the parameter's dtype, as PyTorch's pure-bf16 training)
// that works on the CPU but is refused by the CUDA path's fused kernels, or
// that reads its f16/bf16 state there as if it were f32.
TEST_CASE("a pure low-precision optimizer runs on the CUDA path and matches the CPU", "[optim][precision][sim]") {
  for (DType dtype : {kF16, kBF16}) {
    INFO(dtype_name(dtype));
    std::vector<std::vector<double>> results;
    for (Device device : {kCPU, kSIM}) {
      Tensor a = from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {4}, dtype).to(device).requires_grad_();
      Tensor b = from_vector(std::vector<double>{0.25, -1.0, 2.0, -0.75}, {4}, dtype).to(device).requires_grad_();
      optim::AdamW adamw({a}, {.lr = 0.05, .weight_decay = 0.1});
      optim::SGD sgd({b}, {.lr = 0.1, .momentum = 0.9});
      for (int step = 0; step < 3; ++step) {
        a.set_grad(from_vector(std::vector<double>{0.5, -1.0, 0.25 * step, 2.0}, {4}, dtype).to(device));
        b.set_grad(from_vector(std::vector<double>{-0.5, 1.0, 0.125, -2.0 * step}, {4}, dtype).to(device));
        adamw.step();
        sgd.step();
      }
      CHECK(adamw.state_dict().at("state.0.exp_avg").dtype() == dtype);
      std::vector<double> all = a.to(kCPU).to_vector();
      for (const char* key : {"state.0.exp_avg", "state.0.exp_avg_sq"}) {
        for (double v : adamw.state_dict().at(key).to(kCPU).to_vector()) all.push_back(v);
      }
      for (double v : b.to(kCPU).to_vector()) all.push_back(v);
      for (double v : sgd.state_dict().at("state.0.momentum_buffer").to(kCPU).to_vector()) all.push_back(v);
      results.push_back(all);
    }
    REQUIRE(results[0].size() == results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      INFO("value " << i);
      CHECK(results[1][i] == Approx(results[0][i]).epsilon(1e-2).margin(1e-3));
    }
  }
}

TEST_CASE("stochastic rounding keeps bf16 copies unbiased", "[optim][precision]") {
  // 1 + 1e-3 is not a bf16 value (ulp at 1 is 2^-7 = 7.8e-3): nearest rounding
  // always gives 1, stochastic rounding gives 1 + 2^-7 about 1e-3/7.8e-3 of the time.
  const int64_t n = 4096;
  Tensor p = ones({n}, kBF16).requires_grad_();
  optim::SGD opt({p}, {.lr = 1e-3}, {.master_weights = true, .stochastic_rounding = true, .seed = 9});
  p.set_grad(full({n}, -1.0, kBF16));
  opt.step();
  double mean = 0;
  for (double v : p.to_vector()) mean += v;
  mean /= n;
  CHECK(mean == Approx(1.001).epsilon(2e-4));
}

TEST_CASE("clip_grad_norm_ returns the norm and scales gradients to max_norm", "[optim]") {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  set_grad(a, {3.0, 0.0});
  set_grad(b, {4.0});
  const Tensor norm = optim::clip_grad_norm_({a, b}, 1.0);
  CHECK(norm.item<double>() == Approx(5.0));
  CHECK(a.grad().to_vector()[0] == Approx(0.6).epsilon(1e-5));
  CHECK(b.grad().to_vector()[0] == Approx(0.8).epsilon(1e-5));
  const Tensor small = optim::clip_grad_norm_({a, b}, 10.0);  // below the threshold: untouched
  CHECK(small.item<double>() == Approx(1.0).epsilon(1e-5));
  CHECK(b.grad().to_vector()[0] == Approx(0.8).epsilon(1e-5));
}

// Catches (PyTorch parity): a norm reduction that drops a NaN (a max-style
// combine, or a block reduction losing an empty lane's NaN): the clipped
// step would then train on finite garbage. PyTorch returns a NaN norm and,
// by default, scales every gradient by NaN.
TEST_CASE("clip_grad_norm_ of gradients holding a NaN is NaN, on the CPU and the CUDA path", "[optim][sim]") {
  for (Device device : {kCPU, kSIM}) {
    INFO(device.str());
    Tensor a = zeros({300}, kF32, device).requires_grad_(), b = zeros({2}, kF32, device).requires_grad_();
    std::vector<double> values(300, 0.5);
    values[170] = NAN;
    a.set_grad(from_vector(values, {300}, kF32, device));
    b.set_grad(from_vector(std::vector<double>{3, 4}, {2}, kF32, device));
    const Tensor norm = optim::clip_grad_norm_({a, b}, 1.0);
    CHECK(std::isnan(norm.item<double>()));
    CHECK(std::isnan(b.grad().to_vector()[0]));
  }
}

// Catches: a device-side schedule that drifts from the host formula, advances
// on a skipped step (found_inf set), or is ignored by the update kernel
// (optimizer still using the base lr). Run on the CPU and through the CUDA
// kernels on sim.
TEST_CASE("a schedule counted on the device matches the host schedule and holds on skipped steps",
          "[optim][schedule][sim]") {
  for (Device device : {kCPU, kSIM}) {
    INFO(device.str());
    Tensor host_p = zeros({1}, kF32).requires_grad_();
    Tensor dev_p = zeros({1}, kF32, device).requires_grad_();
    optim::SGD host_opt({host_p}, {.lr = 0.5});
    optim::SGD dev_opt({dev_p}, {.lr = 0.5});
    optim::WarmupCosineLr host_sched(host_opt, 2, 8);
    optim::WarmupCosineLr dev_sched(dev_opt, 2, 8);
    dev_sched.use_device_counter(device);
    const Tensor found_inf = zeros({1}, kF32, device);
    for (int step = 0; step < 8; ++step) {
      const bool skip = step == 3 || step == 4;
      fill_(found_inf, skip ? 1.0 : 0.0);
      host_p.set_grad(ones({1}));
      dev_p.set_grad(ones({1}, kF32, device));
      if (!skip) host_opt.step();
      dev_opt.step({Tensor(), found_inf, Tensor()});
      if (!skip) host_sched.step();
      dev_sched.step_unless(found_inf);
      CHECK(dev_sched.last_step() == host_sched.last_step());
      CHECK(dev_sched.current_lr() == Approx(host_sched.current_lr()).epsilon(1e-12));
      CHECK(dev_p.to(kCPU).item<double>() == Approx(host_p.item<double>()).epsilon(1e-6));
    }
    CHECK(host_sched.last_step() == 6);
    dev_sched.set_step(1);
    CHECK(dev_sched.current_lr() == Approx(0.5 * dev_sched.factor(1)));
  }
}
