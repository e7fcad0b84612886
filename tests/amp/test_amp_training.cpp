// AMP end to end on the CPU: f16 and bf16 training of a small MLP tracks the
// f32 loss curve; clipping after unscale_ matches f32 clipping; a checkpoint
// of model + optimizer + scaler continues bit-identically.
#include <catch2/catch.hpp>
#include <cmath>

#include "mixtape.h"
#include "models/demo_mlp.h"
#include "nn/layers.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using amp::Autocast;
using amp::GradScaler;

namespace {

struct Mlp {
  std::vector<Tensor> params;
  explicit Mlp(uint64_t seed, Device device = kCPU) {
    Generator gen(seed);
    auto init = [&](const Shape& s, double fan_in) {
      const double bound = 1.0 / std::sqrt(fan_in);
      return uniform(s, -bound, bound, kF32, device, &gen).requires_grad_();
    };
    params = {init({32, 2}, 2), init({32}, 2), init({32, 32}, 32), init({32}, 32), init({3, 32}, 32), init({3}, 32)};
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = relu(linear(x, params[0], params[1]));
    h = relu(linear(h, params[2], params[3]));
    return linear(h, params[4], params[5]);
  }
};

struct RunOptions {
  bool autocast = false;
  DType dtype = kF16;
  bool scaler = false;
  double clip = 0;
  int steps = 60;
  Device device = kCPU;
};

struct Run {
  std::vector<double> losses;
  std::vector<double> norms;
  DType logits_dtype = kF32;  // what the model's output ran in
};

// One training iteration in the PyTorch AMP recipe's order.
double train_step(Mlp& model, optim::AdamW& opt, GradScaler& scaler, const models::Dataset& data, int step,
                  const RunOptions& o, std::vector<double>* norms, DType* logits_dtype = nullptr) {
  const int64_t batch = 64, begin = (step * batch) % (data.x.size(0) - batch);
  opt.zero_grad();
  Tensor loss;
  {
    Autocast guard(o.device, o.dtype, o.autocast);
    const Tensor logits = model.forward(data.x.narrow(0, begin, batch));
    if (logits_dtype) *logits_dtype = logits.dtype();
    loss = cross_entropy(logits, data.y.narrow(0, begin, batch));
  }
  scaler.scale(loss).backward();
  if (o.clip > 0) {
    scaler.unscale_(opt);
    const Tensor norm = optim::clip_grad_norm_(model.params, o.clip);
    if (norms) norms->push_back(norm.item<double>());
  }
  scaler.step(opt);
  scaler.update();
  return loss.item<double>();
}

models::Dataset demo_data(Device device) {
  models::Dataset d = models::make_demo_dataset(1024, 5);
  return {d.x.to(device), d.y.to(device)};
}

Run train(const RunOptions& o) {
  const models::Dataset data = demo_data(o.device);
  Mlp model(9, o.device);
  optim::AdamW opt(model.params, {.lr = 1e-2});
  GradScaler scaler({.enabled = o.scaler});
  Run run;
  for (int step = 0; step < o.steps; ++step) {
    run.losses.push_back(train_step(model, opt, scaler, data, step, o, &run.norms, &run.logits_dtype));
  }
  return run;
}

double mean_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += std::fabs(a[i] - b[i]);
  return total / static_cast<double>(a.size());
}

}  // namespace

TEST_CASE("f16 and bf16 autocast training tracks the f32 loss curve", "[amp][e2e]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO("device " << device.str());
    const int steps = device.is_cpu() ? 60 : 30;  // the simulator is slower
    const Run fp32 = train({.steps = steps, .device = device});
    const Run fp16 = train({.autocast = true, .dtype = kF16, .scaler = true, .steps = steps, .device = device});
    const Run bf16 = train({.autocast = true, .dtype = kBF16, .steps = steps, .device = device});
    // Stated tolerance: the mean per-step |loss difference| stays under 0.02
    // (f16, 10-bit mantissa) and 0.05 (bf16, 7-bit mantissa) nats, on a loss
    // that starts near ln 3 = 1.1.
    const double d16 = mean_abs_difference(fp16.losses, fp32.losses);
    const double d_bf16 = mean_abs_difference(bf16.losses, fp32.losses);
    INFO("mean |f16 - f32| = " << d16 << ", mean |bf16 - f32| = " << d_bf16 << ", f32 final " << fp32.losses.back());
    CHECK(d16 < 0.02);
    CHECK(d_bf16 < 0.05);
    // Catches: autocast switched off (or never reaching the model's ops). The
    // runs would then be f32 runs, the scaler's power-of-two scale cancels
    // exactly, and the curves above would match trivially.
    CHECK(fp16.logits_dtype == kF16);
    CHECK(bf16.logits_dtype == kBF16);
    CHECK(d16 > 1e-6);
    CHECK(d_bf16 > 1e-6);
    CHECK(fp32.losses.back() < 0.6 * fp32.losses.front());
    CHECK(fp16.losses.back() < 0.6 * fp16.losses.front());
    CHECK(bf16.losses.back() < 0.6 * bf16.losses.front());
  }
}

TEST_CASE("clipping after unscale_ sees the same norms as f32 clipping", "[amp]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO("device " << device.str());
    const Run fp32 = train({.clip = 0.5, .steps = 10, .device = device});
    const Run fp16 =
        train({.autocast = true, .dtype = kF16, .scaler = true, .clip = 0.5, .steps = 10, .device = device});
    REQUIRE(fp16.norms.size() == fp32.norms.size());
    for (size_t i = 0; i < fp32.norms.size(); ++i) {
      INFO("step " << i);
      CHECK(fp16.norms[i] == Approx(fp32.norms[i]).epsilon(0.02));  // unscaled: not 65536x larger
    }
    CHECK(fp32.norms.front() > 0.5);  // the clip was active
  }
}

TEST_CASE("model + optimizer + scaler state round-trips and continues bit-identically", "[amp][checkpoint]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO("device " << device.str());
    const models::Dataset data = demo_data(device);
    const RunOptions o{.autocast = true, .dtype = kF16, .scaler = true, .clip = 1.0, .device = device};
    Mlp model(9, device);
    optim::AdamW opt(model.params, {.lr = 1e-2});
    GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
    for (int step = 0; step < 7; ++step) train_step(model, opt, scaler, data, step, o, nullptr);

    // "Save": copies of every tensor of state.
    std::vector<Tensor> saved_params;
    for (const Tensor& p : model.params) saved_params.push_back(p.detach().clone());
    const optim::StateDict saved_opt = opt.state_dict();
    const optim::StateDict saved_scaler = scaler.state_dict();

    std::vector<double> continued;
    for (int step = 7; step < 14; ++step) continued.push_back(train_step(model, opt, scaler, data, step, o, nullptr));

    // "Resume" into fresh objects.
    Mlp resumed(123, device);
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < resumed.params.size(); ++i) copy_(resumed.params[i], saved_params[i]);
    }
    optim::AdamW opt2(resumed.params, {.lr = 1e-2});
    opt2.load_state_dict(saved_opt);
    GradScaler scaler2;
    scaler2.load_state_dict(saved_scaler);
    std::vector<double> replayed;
    for (int step = 7; step < 14; ++step)
      replayed.push_back(train_step(resumed, opt2, scaler2, data, step, o, nullptr));
    CHECK(replayed == continued);
    CHECK(scaler2.get_scale() == scaler.get_scale());
    REQUIRE_THROWS_WITH(scaler2.load_state_dict({}), Catch::Contains("missing 'scale'"));
  }
}

// Catches (issue 33, PyTorch's #90342 / #88474): an f16 forward that
// overflows puts inf into BatchNorm's batch statistics; the GradScaler skips
// the step, but the running statistics had already taken the inf. Staged,
// they commit only when the scaler's found_inf is 0 (nn/layers.h's recipe).
TEST_CASE("a step the GradScaler skips for an f16 overflow leaves BatchNorm's running statistics as they were",
          "[amp][batchnorm]") {
  for (Device device : {kCPU, kSIM}) {
    INFO(device.str());
    nn::Sequential model({std::make_shared<nn::Conv2d>(1, 3, 1), std::make_shared<nn::BatchNorm2d>(3),
                          std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12, 2)});
    model.to(device);
    const auto& bn = dynamic_cast<const nn::BatchNorm2d&>(*model.children()[1].second);
    nn::stage_batch_norm_statistics(model);
    optim::SGD opt(model.parameters(), {.lr = 0.1});
    GradScaler scaler;
    const Tensor targets = from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}, kI64, device);
    auto step = [&](const Tensor& x) {  // true when the scaler skipped it
      opt.zero_grad();
      Tensor loss;
      {
        Autocast guard(device, kF16);
        loss = cross_entropy(model.forward(x.to(device)), targets);
      }
      scaler.scale(loss).backward();
      const amp::StepOutcome outcome = scaler.step(opt);
      nn::commit_batch_norm_statistics_unless(model, outcome.found_inf());
      scaler.update();
      return outcome.skipped();
    };
    Generator gen(3);
    const Tensor x = randn({4, 1, 2, 2}, kF32, kCPU, &gen);
    std::vector<double> big = x.to_vector();
    big[0] = 1e5;  // beyond f16's 65504: the convolution's f16 input is inf

    REQUIRE_FALSE(step(x));
    CHECK(bn.num_batches_tracked.to(kCPU).item<int64_t>() == 1);
    const std::vector<double> mean = bn.running_mean.to(kCPU).to_vector(), var = bn.running_var.to(kCPU).to_vector();
    CHECK(step(from_vector(big, {4, 1, 2, 2})));
    CHECK(bn.running_mean.to(kCPU).to_vector() == mean);
    CHECK(bn.running_var.to(kCPU).to_vector() == var);
    CHECK(bn.num_batches_tracked.to(kCPU).item<int64_t>() == 1);
    CHECK_FALSE(step(x));  // and the next clean step commits again
    CHECK(bn.num_batches_tracked.to(kCPU).item<int64_t>() == 2);
    CHECK(bn.running_mean.to(kCPU).to_vector() != mean);
  }
}
