// nn::Module and the layers: names, state_dict, modes, dtype moves, init.
#include <catch2/catch.hpp>
#include <cmath>

#include "mixtape.h"
#include "models/cnn.h"
#include "models/mlp.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "test_util.h"

using namespace mt;
using Catch::Contains;

TEST_CASE("parameters are named in registration order with PyTorch's dotted names", "[nn]") {
  models::Mlp mlp;
  std::vector<std::string> names;
  for (const auto& [n, p] : mlp.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                          "fc3.bias"});
  CHECK(mlp.parameter_count() == 235146);
  models::ResNet resnet;
  const auto state = resnet.state_dict();
  CHECK(state.count("layer2.0.downsample.0.weight") == 1);
  CHECK(state.count("layer2.0.downsample.1.running_var") == 1);
  CHECK(state.count("layer1.1.bn2.num_batches_tracked") == 1);
  CHECK(state.at("layer3.1.conv2.weight").sizes() == Shape{128, 128, 3, 3});
  CHECK(resnet.parameter_count() == 696042);
  CHECK(models::Cnn().parameter_count() == 421834);
}

TEST_CASE("models map N x 1 x 28 x 28 images to N x 10 logits", "[nn][models]") {
  const Tensor x = randn({2, 1, 28, 28});
  for (const char* name : {"mlp", "cnn", "resnet"}) {
    INFO(name);
    auto model = models::make_model(name);
    CHECK(model->forward(x).sizes() == Shape{2, 10});
  }
  REQUIRE_THROWS_WITH(models::make_model("vgg"), Contains("unknown model 'vgg'") && Contains("mlp, cnn, resnet"));
}

TEST_CASE("Linear and Conv2d initialise like PyTorch: U(+-1/sqrt(fan_in))", "[nn][init]") {
  nn::Linear linear(400, 30);
  const auto w = linear.weight.to_vector();
  const double bound = 1.0 / std::sqrt(400.0);
  double max_abs = 0, sum_sq = 0;
  for (double v : w) {
    max_abs = std::max(max_abs, std::fabs(v));
    sum_sq += v * v;
  }
  CHECK(max_abs <= bound);
  CHECK(max_abs > 0.95 * bound);
  CHECK(std::sqrt(sum_sq / w.size()) == Approx(bound / std::sqrt(3.0)).epsilon(0.05));  // std of U(-b, b)
  nn::Conv2d conv(3, 8, 5);
  CHECK(conv.weight.sizes() == Shape{8, 3, 5, 5});
  const auto cw = conv.weight.to_vector();
  CHECK(*std::max_element(cw.begin(), cw.end()) <= 1.0 / std::sqrt(75.0));
}

TEST_CASE("state_dict round-trips, mismatches are named and leave the model untouched", "[nn][state]") {
  manual_seed(1);
  models::Mlp a;
  manual_seed(2);
  models::Mlp b;
  b.load_state_dict(a.state_dict());
  CHECK(b.fc2.get()->weight.to_vector() == a.fc2.get()->weight.to_vector());

  auto state = a.state_dict();
  state.erase("fc3.bias");
  state["extra.weight"] = zeros({1});
  const auto before = b.fc1->weight.to_vector();
  REQUIRE_THROWS_WITH(b.load_state_dict(state), Contains("1 missing key(s) [fc3.bias]") &&
                                                    Contains("1 unexpected key(s) [extra.weight]"));
  auto wrong = a.state_dict();
  wrong["fc1.weight"] = zeros({3, 3});
  REQUIRE_THROWS_WITH(b.load_state_dict(wrong), Contains("'fc1.weight' has shape [3, 3]") && Contains("[256, 784]"));
  CHECK(b.fc1->weight.to_vector() == before);  // nothing was half-loaded
  CHECK_NOTHROW(b.load_state_dict(state, /*strict=*/false));
}

TEST_CASE("train/eval reach every child, BatchNorm uses batch stats in training and running stats in eval",
          "[nn]") {
  models::Cnn cnn;
  cnn.eval();
  CHECK(!cnn.bn1->is_training());
  cnn.train();
  CHECK(cnn.bn2->is_training());
  nn::BatchNorm2d bn(3);
  const Tensor x = add(mul(randn({8, 3, 4, 4}), 2.0), 5.0);
  bn.forward(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn.running_mean.to_vector()[0] == Approx(0.5).epsilon(0.2));  // 0.9 * 0 + 0.1 * ~5
  bn.eval();
  const Tensor y = bn.forward(x);  // normalised with running stats: far from zero mean
  CHECK(mean(y).item<double>() > 1.0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
}

namespace {

std::vector<double> host_values(const Tensor& t) { return t.to(kCPU).to_vector(); }

// [4, 3, 2, 2] values around 5 (an f16 batch), the same for every device.
Tensor bn_batch(uint64_t seed, Device device) {
  Generator gen(seed);
  return add(mul(randn({4, 3, 2, 2}, kF32, kCPU, &gen), 2.0), 5.0).to(kF16).to(device);
}

// A batch whose f16 forward overflowed upstream: inf in channel 0, so its
// batch mean is inf and its variance NaN.
Tensor overflowed_batch(Device device) {
  std::vector<double> v(4 * 3 * 2 * 2, 1.0);
  v[0] = INFINITY;
  v[5] = 3.0;
  return from_vector(v, {4, 3, 2, 2}, kF16, device);
}

void check_same_statistics(const nn::BatchNorm2d& got, const nn::BatchNorm2d& want) {
  CHECK(host_values(got.running_mean) == host_values(want.running_mean));
  CHECK(host_values(got.running_var) == host_values(want.running_var));
  CHECK(got.num_batches_tracked.to(kCPU).item<int64_t>() == want.num_batches_tracked.to(kCPU).item<int64_t>());
}

}  // namespace

// Catches (issue 33, PyTorch's #90342 / #88474): an f16 batch that overflows
// writes inf/NaN into the running statistics, and the GradScaler's skip of
// that step does not take them out again. Staged, the statistics commit only
// when found_inf is 0; a committed step equals the immediate update exactly.
TEST_CASE("BatchNorm2d running statistics survive a step skipped for an overflowing batch", "[nn][batchnorm][amp]") {
  for (Device device : {kCPU, kSIM}) {
    INFO(device.str());
    const Tensor clean = zeros({1}, kF32, device), skipped = ones({1}, kF32, device);
    nn::BatchNorm2d staged(3), immediate(3);
    staged.to(device);
    immediate.to(device);
    staged.stage_statistics();
    REQUIRE(staged.stages_statistics());

    staged.forward(bn_batch(1, device));  // a clean step commits
    immediate.forward(bn_batch(1, device));
    CHECK(host_values(staged.running_mean) == std::vector<double>{0, 0, 0});  // staged, not yet committed
    staged.commit_statistics_unless(clean);
    check_same_statistics(staged, immediate);
    CHECK(staged.num_batches_tracked.to(kCPU).item<int64_t>() == 1);

    const std::vector<double> mean_before = host_values(staged.running_mean);
    const std::vector<double> var_before = host_values(staged.running_var);
    staged.forward(overflowed_batch(device));  // the overflowing step, skipped
    staged.commit_statistics_unless(skipped);
    CHECK(host_values(staged.running_mean) == mean_before);
    CHECK(host_values(staged.running_var) == var_before);
    CHECK(staged.num_batches_tracked.to(kCPU).item<int64_t>() == 1);
    nn::BatchNorm2d poisoned(3);  // what the immediate update keeps: the case is real
    poisoned.to(device);
    poisoned.forward(overflowed_batch(device));
    CHECK_FALSE(std::isfinite(host_values(poisoned.running_mean)[0]));

    // Two micro-batches (gradient accumulation) stage on top of each other.
    staged.forward(bn_batch(2, device));
    staged.forward(bn_batch(3, device));
    staged.commit_statistics_unless(clean);
    immediate.forward(bn_batch(2, device));
    immediate.forward(bn_batch(3, device));
    check_same_statistics(staged, immediate);
    // Without a scaler (no flag) the staged update commits.
    staged.forward(bn_batch(4, device));
    staged.commit_statistics_unless(Tensor());
    immediate.forward(bn_batch(4, device));
    check_same_statistics(staged, immediate);
    staged.commit_statistics_unless(skipped);  // nothing staged: nothing to do
    check_same_statistics(staged, immediate);
  }
}

// Catches a commit that reads found_inf on the host: a sync per step, which
// a CUDA graph cannot capture (the sim records launches as a GPU would).
TEST_CASE("BatchNorm2d commits its staged statistics on the device: capturable, no host read",
          "[nn][batchnorm][graph]") {
  nn::BatchNorm2d staged(3), reference(3);
  staged.to(kSIM);
  reference.to(kSIM);
  nn::stage_batch_norm_statistics(staged);
  const Tensor x = bn_batch(5, kSIM), found_inf = zeros({1}, kF32, kSIM);
  NoGradGuard no_grad;
  auto step = [&] {
    staged.forward(x);
    nn::commit_batch_norm_statistics_unless(staged, found_inf);
  };
  step();  // eager first: the staging buffers exist before the capture
  reference.forward(x);
  CudaGraph graph(kSIM);
  graph.capture(step);
  check_same_statistics(staged, reference);  // capture ran nothing

  fill_(found_inf, 1.0);
  graph.replay();
  check_same_statistics(staged, reference);  // skipped, decided by the replayed kernel
  fill_(found_inf, 0.0);
  graph.replay();
  reference.forward(x);
  check_same_statistics(staged, reference);
}

TEST_CASE("half() casts parameters but keeps norm layers in f32", "[nn][precision]") {
  models::Cnn cnn;
  cnn.half();
  CHECK(cnn.conv1->weight.dtype() == kF16);
  CHECK(cnn.fc2->bias.dtype() == kF16);
  CHECK(cnn.bn1->weight.dtype() == kF32);
  CHECK(cnn.bn1->running_var.dtype() == kF32);
  CHECK(cnn.bn1->num_batches_tracked.dtype() == kI64);
  CHECK(cnn.conv1->weight.requires_grad());
  CHECK(cnn.conv1->weight.is_leaf());
  nn::LayerNorm ln({4});
  ln.to(kBF16, /*keep_norms_fp32=*/false);
  CHECK(ln.weight.dtype() == kBF16);
}

// PyTorch habit: build the optimizer, then model.to(device). to() used to
// replace every parameter handle, so the optimizer held the old tensors and
// the model trained nothing ("weight moved by 0"), even for to(kCPU).
TEST_CASE("an optimizer built before model.to(device) still trains the model (replaced-handle bug)", "[nn][optim]") {
  for (const Device device : {kCPU, kSIM}) {
    INFO(device.str());
    models::Mlp model;
    optim::AdamW opt(model.parameters(), {.lr = 1e-2});
    const Tensor held = model.fc1->weight;  // a reference the user keeps
    model.to(device);
    CHECK(held.device() == device);  // the handle itself moved
    CHECK(held.is_same(model.fc1->weight));
    const Tensor before = model.fc1->weight.to(kCPU).clone();
    const Tensor x = randn({8, 784}).to(device);
    const Tensor y = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {8}, kI64).to(device);
    cross_entropy(model.forward(x), y).backward();
    opt.step();
    const double moved = max(abs(sub(model.fc1->weight.to(kCPU), before))).item<double>();
    CHECK(moved > 1e-4);
    // Back to the CPU after a step: the optimizer's state follows on the next one.
    model.to(kCPU);
    opt.zero_grad();
    cross_entropy(model.forward(x.to(kCPU)), y.to(kCPU)).backward();
    CHECK_NOTHROW(opt.step());
  }
}

// PyTorch habit: tie weights by assignment. The tied tensor used to appear
// twice in parameters(), so the optimizer stepped it twice, and to() broke
// the tie (each name got its own copy).
TEST_CASE("weights tied by assignment are one parameter, stepped once, and stay tied through to() (tie bugs)",
          "[nn][optim]") {
  nn::Sequential model({std::make_shared<nn::Linear>(4, 4, false), std::make_shared<nn::Linear>(4, 4, false)});
  auto first = std::dynamic_pointer_cast<nn::Linear>(model.children()[0].second);
  auto second = std::dynamic_pointer_cast<nn::Linear>(model.children()[1].second);
  second->weight = first->weight;
  CHECK(model.parameters().size() == 1);
  CHECK(model.named_parameters()[0].first == "0.weight");  // the first name wins
  CHECK(model.state_dict().size() == 2);                   // both names are saved, as PyTorch does
  model.to(kSIM);
  CHECK(first->weight.is_same(second->weight));
  CHECK(second->weight.device() == kSIM);
  // One SGD step moves the shared weight by lr x its (accumulated) gradient, once.
  const Tensor w0 = first->weight.to(kCPU).clone();
  optim::SGD opt(model.parameters(), {.lr = 0.5});
  sum(model.forward(ones({2, 4}, kF32, kSIM))).backward();
  const Tensor grad = first->weight.grad().to(kCPU);
  opt.step();
  CHECK(max(abs(sub(first->weight.to(kCPU), sub(w0, mul(grad, 0.5))))).item<double>() < 1e-6);
}

TEST_CASE("Sequential, ModuleList, Dropout, Embedding, Flatten and activations", "[nn]") {
  nn::Sequential seq({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12, 4),
                      std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::SiLU>(),
                      std::make_shared<nn::ReLU>()});
  CHECK(seq.size() == 6);
  CHECK(seq.named_parameters().front().first == "1.weight");
  const Tensor x = randn({5, 3, 4});
  seq.eval();
  const Tensor a = seq.forward(x), b = seq.forward(x);
  CHECK(a.to_vector() == b.to_vector());  // dropout is the identity in eval
  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(2, 2));
  CHECK(list.named_parameters().front().first == "0.weight");
  REQUIRE_THROWS_WITH(list.forward(x), Contains("ModuleList"));
  nn::Embedding emb(10, 3);
  CHECK(emb.forward(from_vector(std::vector<int64_t>{1, 9, 1}, {3})).sizes() == Shape{3, 3});
  seq.zero_grad();
}

// What FSDP's unit gathering rests on: every ForwardScope is announced on
// entering and leaving, nested in order, to every observer until removed.
TEST_CASE("a ForwardScope observer hears each module's forward enter and leave, in order", "[nn]") {
  struct Recorder : nn::ForwardScope::Observer {
    std::vector<std::string> events;
    void entering(const nn::Module& m) override { events.push_back("enter " + m.name()); }
    void leaving(const nn::Module& m) noexcept override { events.push_back("leave " + m.name()); }
  } recorder;
  auto seq = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::LayerNorm>(Shape{2})});
  nn::ForwardScope::add_observer(&recorder);
  seq->forward(ones({1, 3}));
  nn::ForwardScope::remove_observer(&recorder);
  seq->forward(ones({1, 3}));
  CHECK(recorder.events == std::vector<std::string>{"enter Sequential", "enter Linear", "leave Linear",
                                                    "enter LayerNorm", "leave LayerNorm", "leave Sequential"});
}

// ---------------------------------------------------------------- folding a batch norm into its convolution

namespace {

// A BatchNorm2d in eval mode with statistics and affine parameters far from
// the identity, so that every term of the fold matters.
std::shared_ptr<nn::BatchNorm2d> trained_looking_batch_norm(int64_t channels, uint64_t seed) {
  auto bn = std::make_shared<nn::BatchNorm2d>(channels);
  bn->to(kF64);
  const NoGradGuard no_grad;
  copy_(bn->running_mean, test::randn64({channels}, seed));
  copy_(bn->running_var, test::uniform64({channels}, 0.2, 3.0, seed + 1));
  copy_(bn->weight, test::uniform64({channels}, -2.0, 2.0, seed + 2));
  copy_(bn->bias, test::randn64({channels}, seed + 3));
  bn->eval();
  return bn;
}

}  // namespace

// Catches: a fold that forgets the running mean in the bias, scales the bias
// by gamma without dividing by sqrt(var + eps), scales the weight along the
// input channels instead of the output channels, or gives a bias-free
// convolution no bias (its beta - mean * s lost); and a folded batch norm
// that still normalises (applied twice) or lets itself train.
TEST_CASE("Conv2d::fold_batch_norm computes conv then batch norm (eval) in one convolution", "[nn][int8]") {
  for (const bool with_bias : {true, false}) {
    INFO("conv bias " << with_bias);
    manual_seed(3);
    nn::Conv2d conv(3, 4, 3, 1, 1, 1, 1, with_bias);
    conv.to(kF64);
    auto bn = trained_looking_batch_norm(4, 11);
    const Tensor x = test::randn64({2, 3, 5, 6}, 7);
    const NoGradGuard no_grad;
    const Tensor want = bn->forward(conv.forward(x));
    conv.fold_batch_norm(*bn);
    CHECK(bn->is_folded());
    CHECK(conv.bias.defined());
    CHECK(conv.state_dict().count("bias") == 1);
    const Tensor got = bn->forward(conv.forward(x));
    test::check_close(got, want, 1e-12, "folded");
    CHECK_THROWS_WITH(conv.fold_batch_norm(*bn), Contains("folded already"));
    bn->train();
    CHECK_THROWS_WITH(bn->forward(got), Contains("cannot train"));
  }
  nn::Conv2d wide(3, 5, 3);
  auto bn = trained_looking_batch_norm(4, 1);
  CHECK_THROWS_WITH(wide.fold_batch_norm(*bn), Contains("4 channels after a convolution of 5 output channels"));
}
