// Post-training static quantization of Linear layers (amp/int8_quantize.h):
// calibration attaches to the right layers and only while alive, convert()
// gives each layer the observer's range, and an INT8 state dict loads back
// only into INT8 slots with scales that make sense.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "amp/int8_quantize.h"
#include "core/host_sync.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"
#include "models/cnn.h"

using namespace mt;
using Catch::Contains;

namespace {

// Two Linears and a third the forward never calls (as a MoE router read by its weight).
struct TwoLayers : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, unused;
  TwoLayers() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 12));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(12, 4));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

amp::int8::QuantizeOptions options(const std::string& observer, std::vector<std::string> keep_float = {}) {
  amp::int8::QuantizeOptions o;
  o.observer = observer;
  o.keep_float = std::move(keep_float);
  return o;
}

std::shared_ptr<TwoLayers> seeded_model() {
  manual_seed(5);
  return std::make_shared<TwoLayers>();
}

// seeded_model() calibrated with min/max on x and converted to INT8.
std::shared_ptr<TwoLayers> int8_model(const Tensor& x) {
  auto model = seeded_model();
  amp::int8::Calibrator calibrator(*model, options("minmax"));
  const NoGradGuard no_grad;
  model->forward(x);
  calibrator.convert();
  return model;
}

}  // namespace

// Catches: an observer that misses batches (the last one ignored: its
// amax, 3x the others, would not be in the range), an input scale not
// amax / 127, the weight not replaced by its i8 form, hooks left attached
// after convert (a later forward would still observe), and a layer no
// batch reached converted with a made-up range instead of kept in float.
TEST_CASE("int8 calibration: each Linear's input scale is its observed amax / 127", "[amp][int8]") {
  auto model = seeded_model();
  const std::vector<Tensor> batches = {test::random_tensor({8, 16}, kF32, kCPU, 1),
                                       test::random_tensor({8, 16}, kF32, kCPU, 2),
                                       test::random_tensor({8, 16}, kF32, kCPU, 3, -3, 3)};
  double amax1 = 0, amax2 = 0;
  {
    const NoGradGuard no_grad;
    for (const Tensor& b : batches) {
      amax1 = std::max(amax1, max(b.abs()).item<double>());
      amax2 = std::max(amax2, max(relu(model->fc1->forward(b)).abs()).item<double>());
    }
  }
  amp::int8::Calibrator calibrator(*model, options("minmax"));
  {
    const NoGradGuard no_grad;
    for (const Tensor& b : batches) model->forward(b);
  }
  const amp::int8::QuantizeReport report = calibrator.convert();
  CHECK(report.quantized == std::vector<std::string>{"fc1", "fc2"});
  REQUIRE(report.kept_float.size() == 1);
  CHECK(report.kept_float[0].layer == "unused");
  CHECK(report.kept_float[0].reason == "no calibration batch reached it");
  CHECK(model->fc1->is_int8());
  CHECK(!model->unused->is_int8());
  CHECK(model->fc1->weight.dtype() == kI8);
  CHECK(model->fc1->input_scale.item<double>() == Approx(amax1 / 127).epsilon(1e-6));
  CHECK(model->fc2->input_scale.item<double>() == Approx(amax2 / 127).epsilon(1e-6));
  CHECK(model->fc1->input_zero_point.item<double>() == 128);
  // Hooks are gone: another forward after convert runs INT8 and observes nothing (no throw on NaN).
  const NoGradGuard no_grad;
  CHECK_NOTHROW(model->forward(full({1, 16}, std::numeric_limits<double>::quiet_NaN())));
}

// Catches: the INT8 model drifting from its float twin by more than
// rounding (a wrong scale or zero point gives errors of the outputs' size),
// and --keep-float ignored.
TEST_CASE("an int8 model stays close to its float twin, kept layers stay float", "[amp][int8]") {
  auto model = seeded_model();
  auto twin = seeded_model();
  const Tensor x = test::random_tensor({32, 16}, kF32, kCPU, 9);
  amp::int8::Calibrator calibrator(*model, options("minmax", {"fc2"}));
  const NoGradGuard no_grad;
  model->forward(x);
  const amp::int8::QuantizeReport report = calibrator.convert();
  CHECK(report.quantized == std::vector<std::string>{"fc1"});
  CHECK(!model->fc2->is_int8());
  const std::vector<double> got = model->forward(x).to_vector(), want = twin->forward(x).to_vector();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  INFO("largest |y| " << largest << ", worst error " << worst);
  CHECK(worst < 0.02 * largest);
  CHECK(worst > 0);  // it really ran in INT8
}

// Catches: a calibration batch with a NaN poisoning a range silently, a
// typo in --keep-float quantizing everything, and an unknown observer
// found only after the calibration ran.
TEST_CASE("int8 calibration refuses non-finite inputs, unknown layers and observers", "[amp][int8][errors]") {
  auto model = seeded_model();
  {
    amp::int8::Calibrator calibrator(*model, options("entropy"));
    const NoGradGuard no_grad;
    CHECK_THROWS_WITH(model->forward(full({2, 16}, std::numeric_limits<double>::infinity())),
                      Contains("the input of 'fc1' was refused"));
  }
  CHECK_THROWS_WITH(amp::int8::Calibrator(*model, options("entropy", {"fc3"})),
                    Contains("'fc3' is not a Linear or Conv2d"));
  CHECK_THROWS_WITH(amp::int8::Calibrator(*model, options("maxmin")), Contains("minmax"));
}

// Catches: an INT8 state dict loading into float slots (integers read as
// weights), a float one into INT8 slots, and a hostile file's zero or NaN
// scale or out-of-range zero point accepted.
TEST_CASE("an int8 state dict loads back only into int8 slots, with sane scales", "[amp][int8][errors]") {
  const Tensor x = test::random_tensor({4, 16}, kF32, kCPU, 2);
  auto model = int8_model(x);
  const NoGradGuard no_grad;
  const nn::StateDict state = model->state_dict();
  CHECK(state.at("fc1.weight").dtype() == kI8);
  CHECK(state.count("fc1.weight_scale") == 1);

  auto fresh = seeded_model();
  CHECK_THROWS_WITH(fresh->load_state_dict(state, /*strict=*/false), Contains("loads only into a layer made INT8"));
  amp::int8::prepare_int8_layers(*fresh, amp::int8::int8_layer_names(*model));
  fresh->load_state_dict(state);
  amp::int8::check_int8_layers(*fresh);
  CHECK(fresh->forward(x).to_vector() == model->forward(x).to_vector());

  for (const auto& [key, value] :
       std::vector<std::pair<std::string, double>>{{"fc1.weight_scale", 0.0},
                                                   {"fc2.weight_scale", std::numeric_limits<double>::quiet_NaN()},
                                                   {"fc1.input_scale", -1.0},
                                                   {"fc2.input_zero_point", 300.0},
                                                   {"fc1.weight_zero_point", -128.0}}) {
    nn::StateDict hostile = state;
    hostile[key] = full_like(state.at(key), value);
    auto victim = seeded_model();
    amp::int8::prepare_int8_layers(*victim, {"fc1", "fc2"});
    victim->load_state_dict(hostile);
    INFO(key << " = " << value);
    CHECK_THROWS_WITH(amp::int8::check_int8_layers(*victim), Contains(key.substr(0, 3)));
  }
  CHECK_THROWS_WITH(amp::int8::prepare_int8_layers(*fresh, {"fc9"}), Contains("'fc9' is not a Linear or Conv2d layer"));
}

// Catches: an INT8 layer reading its input's scale and zero point back from
// the device at every forward (host syncs per layer per call on a GPU), and
// a kept zero point that outlives a change of the buffer (one written after
// the check must be used, not the stale value).
TEST_CASE("an int8 model's forward on the CUDA path reads nothing back from the device", "[amp][int8][sim]") {
  const Tensor x = test::random_tensor({4, 16}, kF32, kCPU, 2);
  auto model = int8_model(x);
  const NoGradGuard no_grad;
  const std::vector<double> on_cpu = model->forward(x).to_vector();
  model->to(test::kCudaPath);
  amp::int8::check_int8_layers(*model);
  const Tensor xd = x.to(test::kCudaPath);
  const int64_t before = host_sync_count();
  const Tensor y = model->forward(xd);
  CHECK(host_sync_count() - before == 0);
  const std::vector<double> got = y.to(kCPU).to_vector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(on_cpu[i]).margin(1e-5));

  // A zero point written after the check: the layer must quantize with it
  // (10 instead of 128: inputs below -10 steps clip).
  copy_(model->fc1->input_zero_point, full({}, 10, kI32, test::kCudaPath));
  const std::vector<double> changed = model->forward(xd).to(kCPU).to_vector();
  nn::StateDict state;
  for (const auto& [key, value] : model->state_dict()) state[key] = value.to(kCPU);
  auto reference = seeded_model();
  amp::int8::prepare_int8_layers(*reference, {"fc1", "fc2"});
  reference->load_state_dict(state);
  amp::int8::check_int8_layers(*reference);
  const std::vector<double> want = reference->forward(x).to_vector();
  REQUIRE(want != on_cpu);  // the new zero point changes the result
  for (size_t i = 0; i < want.size(); ++i) CHECK(changed[i] == Approx(want[i]).margin(1e-5));
  // The same on the CPU: a checked layer given a new zero point by a later load.
  auto on_host = int8_model(x);
  on_host->load_state_dict(state);
  CHECK(on_host->forward(x).to_vector() == want);
}

// Catches: a model's pairs resolved against the wrong module (a BasicBlock's
// "conv1" taken for the stem's, the downsample path's pair missed), a fold
// that changes what the model computes in eval, and a checkpoint naming a
// pair its model does not list (folding a batch norm into a convolution
// whose output also goes elsewhere would change the model) accepted.
TEST_CASE("fold_batch_norms folds the pairs each module lists, and a checkpoint may name only those", "[amp][int8]") {
  manual_seed(4);
  models::ResNet resnet;
  {
    const NoGradGuard no_grad;
    uint64_t seed = 20;
    for (const auto& [name, module] : resnet.named_modules()) {
      auto* bn = module->as<nn::BatchNorm2d>();
      if (bn == nullptr) continue;
      const int64_t c = bn->running_mean.numel();
      copy_(bn->running_mean, test::random_tensor({c}, kF32, kCPU, ++seed));
      const Tensor r = test::random_tensor({c}, kF32, kCPU, ++seed);
      copy_(bn->running_var, add(mul(r, r), 0.5));
      copy_(bn->weight, test::random_tensor({c}, kF32, kCPU, ++seed));
    }
  }
  resnet.eval();
  const Tensor x = test::random_tensor({2, 1, 28, 28}, kF32, kCPU, 3);
  const NoGradGuard no_grad;
  const std::vector<double> want = resnet.forward(x).to_vector();
  const std::vector<amp::int8::FoldedBatchNorm> folded = amp::int8::fold_batch_norms(resnet);
  REQUIRE(folded.size() == 15);
  CHECK(folded.front() == amp::int8::FoldedBatchNorm{"conv1", "bn1"});
  CHECK(folded[1] == amp::int8::FoldedBatchNorm{"layer1.0.conv1", "layer1.0.bn1"});
  CHECK(folded[7] == amp::int8::FoldedBatchNorm{"layer2.0.downsample.0", "layer2.0.downsample.1"});
  const std::vector<double> got = resnet.forward(x).to_vector();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  INFO("largest |logit| " << largest << ", worst change " << worst);
  CHECK(worst <= 1e-4 * largest);
  CHECK(amp::int8::fold_batch_norms(resnet).empty());  // each once

  models::ResNet fresh;
  CHECK_THROWS_WITH(amp::int8::prepare_folded_batch_norms(fresh, {{"conv1", "layer1.0.bn1"}}),
                    Contains("not a convolution and batch norm pair this model can fold"));
  CHECK_THROWS_WITH(amp::int8::prepare_folded_batch_norms(fresh, {{"conv9", "bn9"}}), Contains("conv9"));
  amp::int8::prepare_folded_batch_norms(fresh, {{"layer2.0.downsample.0", "layer2.0.downsample.1"}});
  CHECK(fresh.state_dict().count("layer2.0.downsample.0.bias") == 1);
  CHECK(fresh.state_dict().count("layer2.0.conv1.bias") == 0);
}

// The cnn quantized twice from the same weights and calibration data, once
// handing u8 from layer to layer (conv1 -> conv2 -> fc1 -> fc2) and once
// writing f32 between them: the logits must be the same bits, as quantizing
// commutes with ReLU and max-pool. Catches a requantization with the
// producer's own input scale instead of the consumer's, a ReLU left out of
// the producer's epilogue (a negative value would requantize under the zero
// point and survive the model's u8 ReLU), a consumer quantizing a u8 input
// again, and a handoff list a checkpoint may name that the model does not
// declare (one across a batch norm left unfolded included).
TEST_CASE("INT8 handoffs keep u8 between layers with the same logits as f32 between them", "[amp][int8]") {
  const Tensor calibration = test::random_tensor({16, 1, 28, 28}, kF32, kCPU, 31);
  const Tensor x = test::random_tensor({4, 1, 28, 28}, kF32, kCPU, 32);
  auto quantized = [&](bool hand_off) {
    manual_seed(6);
    auto cnn = std::make_shared<models::Cnn>();
    cnn->eval();
    amp::int8::fold_batch_norms(*cnn);
    amp::int8::Calibrator calibrator(*cnn, options("minmax"));
    {
      const NoGradGuard no_grad;
      cnn->forward(calibration);
    }
    calibrator.convert();
    if (hand_off) {
      const std::vector<amp::int8::Int8Handoff> made = amp::int8::chain_int8_layers(*cnn);
      REQUIRE(made.size() == 3);
      CHECK(made[0] == amp::int8::Int8Handoff{"conv1", "conv2", true});
      CHECK(made[2] == amp::int8::Int8Handoff{"fc1", "fc2", true});
    }
    return cnn;
  };
  const auto plain = quantized(false), chained = quantized(true);
  const NoGradGuard no_grad;
  const Tensor want = plain->forward(x), got = chained->forward(x);
  CHECK(got.dtype() == kF32);  // the last layer hands nothing on: float logits
  CHECK(got.to_vector() == want.to_vector());
  // conv1's output is u8 now, requantized with conv2's input scale.
  CHECK(chained->conv1->forward(x).dtype() == kU8);
  REQUIRE(chained->conv1->output_requantization().has_value());
  CHECK(chained->conv1->output_requantization()->scale == chained->conv2->input_scale.item<double>());

  auto fresh = std::make_shared<models::Cnn>();
  CHECK_THROWS_WITH(amp::int8::apply_int8_handoffs(*fresh, {{"conv1", "fc2", true}}),
                    Contains("not one this model declares"));
  CHECK_THROWS_WITH(amp::int8::apply_int8_handoffs(*fresh, {{"fc1", "fc2", true}}),
                    Contains("both layers must be INT8"));
  // Across a batch norm that is not folded (it may flip or shift values) there is no handoff.
  CHECK_THROWS_WITH(amp::int8::apply_int8_handoffs(*fresh, {{"conv1", "conv2", true}}),
                    Contains("not one this model declares"));
}
