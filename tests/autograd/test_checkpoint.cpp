// Activation checkpointing (autograd/checkpoint.h): identical gradients,
// dropout and autocast included, lower peak memory, scaled gradients marked.
#include <catch2/catch.hpp>

#include "mixtape.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/registry.h"

using namespace mt;

namespace {

struct Grads {
  std::vector<std::vector<double>> values;
  int64_t peak_bytes = 0;
  double loss = 0;
};

// One forward and backward of a gpt with dropout between blocks' inputs (via
// a checkpointed dropout + block), from the same seed each time.
Grads run_gpt(bool checkpointed, bool bf16_autocast) {
  manual_seed(21);
  models::Gpt model(models::GptConfig{.vocab = 256, .context = 32, .layers = 3, .heads = 2, .width = 32, .moe = {}});
  model.checkpoint_activations = checkpointed;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 4 * 32; ++i) ids.push_back((i * 53 + 7) % 256);
  const Tensor x = from_vector(ids, {4, 32}), y = from_vector(ids, {4 * 32});
  allocator_for(kCPU).reset_peak();
  const int64_t before = memory_stats(kCPU).current_bytes;
  Tensor loss;
  {
    std::optional<amp::Autocast> autocast;
    if (bf16_autocast) autocast.emplace(kCPU, kBF16);
    loss = cross_entropy(model.forward(x).reshape({4 * 32, 256}), y);
  }
  const int64_t peak_forward = memory_stats(kCPU).peak_bytes - before;
  loss.backward();
  Grads out;
  out.loss = loss.item<double>();
  out.peak_bytes = peak_forward;
  for (const Tensor& p : model.parameters()) out.values.push_back(p.grad().to_vector());
  return out;
}

// One training-mode forward and backward of cnn or resnet on 8 images; the
// gradients, then every buffer (BatchNorm's running statistics and counters).
Grads run_conv_net(const std::string& name, bool checkpointed) {
  manual_seed(22);
  const std::shared_ptr<nn::Module> model = models::make_model(name);
  if (checkpointed) REQUIRE(model->enable_activation_checkpointing());
  model->train();
  const Tensor x = randn({8, 1, 28, 28});
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  const int64_t before = memory_stats(kCPU).current_bytes;
  const Tensor loss = cross_entropy(model->forward(x), y);
  const int64_t held_for_backward = memory_stats(kCPU).current_bytes - before;
  loss.backward();
  Grads out;
  out.loss = loss.item<double>();
  out.peak_bytes = held_for_backward;  // here: what the graph keeps between forward and backward
  for (const Tensor& p : model->parameters()) out.values.push_back(p.grad().to_vector());
  for (const auto& [buffer, b] : model->named_buffers()) out.values.push_back(b.to_vector());
  return out;
}

}  // namespace

// Catches: BatchNorm updating its running statistics and batch counter again
// when a checkpointed stage is recomputed in backward (momentum applied
// twice, as PyTorch's checkpoint does), gradients of the convolutions inside
// lost, and a checkpoint that keeps the stage's activations anyway.
TEST_CASE("checkpointed cnn and resnet stages give identical gradients and running statistics with less memory",
          "[autograd][checkpoint]") {
  for (const std::string name : {"cnn", "resnet"}) {
    INFO(name);
    const Grads plain = run_conv_net(name, false), saved = run_conv_net(name, true);
    CHECK(saved.loss == plain.loss);
    REQUIRE(saved.values.size() == plain.values.size());
    for (size_t i = 0; i < plain.values.size(); ++i) {
      INFO("tensor " << i);
      CHECK(saved.values[i] == plain.values[i]);
    }
    // cnn recomputes only its second stage (the first sees only the images);
    // resnet all three stages.
    CHECK(saved.peak_bytes < plain.peak_bytes * (name == "cnn" ? 3 : 1) / 4);
  }
  CHECK_FALSE(models::make_model("mlp")->enable_activation_checkpointing());
}

// Catches: a recomputation that runs outside the forward's autocast state
// (bf16 forward, f32 recompute: different gradients), gradients of the
// parameters inside lost (they only arrive through the nested backward),
// and a checkpoint that saves the activations anyway (no memory saved).
TEST_CASE("a checkpointed gpt gives identical gradients with less memory, in f32 and under bf16 autocast",
          "[autograd][checkpoint]") {
  for (bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16 autocast" : "f32"));
    const Grads plain = run_gpt(false, bf16), saved = run_gpt(true, bf16);
    CHECK(saved.loss == plain.loss);
    REQUIRE(saved.values.size() == plain.values.size());
    for (size_t i = 0; i < plain.values.size(); ++i) CHECK(saved.values[i] == plain.values[i]);
    CHECK(saved.peak_bytes < plain.peak_bytes * 3 / 4);
  }
}

// Catches: the recomputation drawing a fresh dropout mask (gradients then
// belong to another network), or shifting the stream for later draws.
TEST_CASE("checkpoint replays the forward's dropout stream and leaves the stream where it was",
          "[autograd][checkpoint]") {
  const auto fn = [](const std::vector<Tensor>& in) { return mul(dropout(in[0], 0.5, true), in[0]); };
  auto run = [&](bool checkpointed) {
    manual_seed(4);
    Tensor x = randn({64}).requires_grad_();
    const Tensor y = checkpointed ? checkpoint(fn, {x}) : fn({x});
    sum(y).backward();
    const double next_draw = rand({1}).item<double>();
    return std::pair{x.grad().to_vector(), next_draw};
  };
  const auto [plain_grad, plain_next] = run(false);
  const auto [saved_grad, saved_next] = run(true);
  CHECK(saved_grad == plain_grad);
  CHECK(saved_next == plain_next);
}

// Catches: parameter gradients from the nested backward not marked as scaled,
// so clip_grad_norm_ would clip scaled gradients without complaint.
TEST_CASE("gradients reached through a checkpoint under a GradScaler are marked scaled",
          "[autograd][checkpoint][amp]") {
  Tensor w = full({4}, 0.5).requires_grad_();
  const Tensor x = full({4}, 2.0).requires_grad_();
  amp::GradScaler scaler;
  const Tensor loss = sum(checkpoint([&](const std::vector<Tensor>& in) { return mul(in[0], w); }, {x}));
  scaler.scale(loss).backward();
  CHECK_THROWS_WITH(optim::clip_grad_norm_({w}, 1.0), Catch::Contains("unscale"));
  // Inputs that need no gradient: fn simply runs and the parameter still gets its gradient.
  Tensor v = full({2}, 3.0).requires_grad_();
  sum(checkpoint([&](const std::vector<Tensor>& in) { return mul(in[0], v); }, {full({2}, 1.0)})).backward();
  CHECK(v.grad().to_vector() == std::vector<double>{1, 1});
}
