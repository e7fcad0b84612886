// Delayed scaling against a model of Transformer Engine's rule written here
// the way TE writes it (transformer_engine/pytorch: the cast records amax in
// amax_history[0]; _default_get_amax_and_update_history takes max(history)
// or history[0], rolls the history by -1 and zeroes slot 0;
// _default_sf_compute keeps the scale where amax is 0 or not finite), step
// by step over a sequence with a zero step and an overflow in it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/sim_tensor_util.h"
#include "mixtape.h"
#include "nn/layers.h"

using namespace mt;
using Catch::Contains;

namespace {

struct TransformerEngineModel {
  std::vector<float> history;
  float scale = 1.0f;
  bool most_recent = false;
  int margin = 0;

  void record(float amax) { history[0] = std::max(history[0], amax); }
  void update() {
    float amax = history[0];
    if (!most_recent) {
      for (float h : history) amax = (std::isnan(h) || h > amax) ? h : amax;  // torch.max propagates NaN
    }
    std::rotate(history.begin(), history.begin() + 1, history.end());  // torch.roll(history, -1, 0)
    history[0] = 0.0f;
    const float sf = 448.0f / amax * std::ldexp(1.0f, -margin);
    if (amax > 0.0f && std::isfinite(amax)) scale = sf;
  }
};

// x of 37 values whose max |x| is exactly `amax` (inf or 0 included).
std::vector<double> input_with_amax(float amax, std::mt19937& rng) {
  std::uniform_real_distribution<double> unit(-1, 1);
  std::vector<double> v(37);
  const double finite = std::isfinite(amax) ? amax : 1.0;
  for (double& x : v) x = static_cast<float>(unit(rng) * finite);
  v[static_cast<size_t>(rng() % v.size())] = (rng() % 2 ? -1.0 : 1.0) * amax;
  return v;
}

}  // namespace

TEST_CASE("delayed scaling follows Transformer Engine's rule step by step (bug: a history not rolled)",
          "[fp8][sim]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> amaxes = {3.0f, 0.5f, 200.0f, 0.0f, 7.0f, inf, 1.0f, 0.25f, 40.0f, 2.0f, 600.0f, 9.0f};
  for (Device device : {kCPU, test::kCudaPath}) {
    for (amp::AmaxAlgo algo : {amp::AmaxAlgo::Max, amp::AmaxAlgo::MostRecent}) {
      for (int margin : {0, 1}) {
        INFO(device.str() << (algo == amp::AmaxAlgo::Max ? " max" : " most_recent") << " margin " << margin);
        amp::DelayedScaling scaling(fp8::Format::E4M3, {4, algo, margin}, device);
        TransformerEngineModel model{std::vector<float>(4, 0.0f), 1.0f, algo == amp::AmaxAlgo::MostRecent, margin};
        std::mt19937 rng(17);
        for (size_t step = 0; step < amaxes.size(); ++step) {
          INFO("step " << step << " amax " << amaxes[step]);
          const std::vector<double> values = input_with_amax(amaxes[step], rng);
          const Tensor x = from_vector(values, {37}, kF32, device);
          const fp8::Fp8Tensor q = scaling.quantize(x);
          // This step quantizes with the scale the earlier steps made.
          const Tensor bytes = q.data.to(kCPU);
          const auto* got = static_cast<const uint8_t*>(bytes.data_ptr());
          for (size_t i = 0; i < values.size(); ++i) {
            CHECK(int(got[i]) == int(f32_to_e4m3_bits(static_cast<float>(values[i]) * model.scale)));
          }
          CHECK(q.scale_inv.item<float>() == 1.0f / model.scale);
          model.record(amaxes[step]);
          scaling.update();
          model.update();
          CHECK(scaling.scale().item<float>() == model.scale);
          CHECK(scaling.scale_inv().item<float>() == 1.0f / model.scale);
          const std::vector<double> history = scaling.amax_history().to_vector();
          for (size_t i = 0; i < history.size(); ++i) CHECK(static_cast<float>(history[i]) == model.history[i]);
        }
      }
    }
  }
}

TEST_CASE("delayed scaling: an overflow holds the scale for the history's length (bug: inf taken as a scale)",
          "[fp8]") {
  amp::DelayedScaling scaling(fp8::Format::E5M2, {3, amp::AmaxAlgo::Max, 0}, kCPU);
  scaling.quantize(full({4}, 2.0));
  scaling.update();
  CHECK(scaling.scale().item<float>() == 57344.0f / 2.0f);
  scaling.quantize(full({4}, std::numeric_limits<double>::infinity()));
  for (int step = 0; step < 3; ++step) {  // the inf is in the window for three updates
    scaling.update();
    CHECK(scaling.scale().item<float>() == 57344.0f / 2.0f);
    scaling.quantize(full({4}, 8.0));
  }
  scaling.update();
  CHECK(scaling.scale().item<float>() == 57344.0f / 8.0f);
  REQUIRE_THROWS_WITH(amp::DelayedScaling(fp8::Format::E4M3, {0, amp::AmaxAlgo::Max, 0}, kCPU),
                      Contains("history_len"));
}

TEST_CASE("delayed scaling state round-trips and refuses hostile values (bug: a zero scale loaded)", "[fp8]") {
  Generator gen(3);
  nn::Linear layer(8, 4);
  amp::Fp8State saved(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
  {
    amp::Fp8Autocast region(saved);
    sum(layer.forward(randn({2, 8}, kF32, kCPU, &gen))).backward();
  }
  saved.update();
  const std::map<std::string, Tensor> state = saved.state_dict(layer);
  CHECK(state.size() == 6);  // input, weight, grad_output: a history and a scale each
  amp::Fp8State restored(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
  restored.load_state_dict(layer, state);
  for (const auto& [name, t] : restored.state_dict(layer)) {
    INFO(name);
    CHECK(t.to_vector() == state.at(name).to_vector());
  }
  auto with = [&](const std::string& key, Tensor value) {
    auto hostile = state;
    hostile[key] = value;
    amp::Fp8State target(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
    target.load_state_dict(layer, hostile);
  };
  for (double bad : {0.0, -2.0, std::nan(""), HUGE_VAL}) {
    REQUIRE_THROWS_WITH(with("weight.input.scale", full({}, bad)), Contains("positive finite scale"));
  }
  REQUIRE_THROWS_WITH(with("weight.weight.amax_history", full({4}, -1.0)), Contains("amaxes >= 0"));
  REQUIRE_THROWS_WITH(with("weight.weight.amax_history", full({4}, std::nan(""))), Contains("amaxes >= 0"));
  REQUIRE_THROWS_WITH(with("weight.weight.amax_history", zeros({5})), Contains("f32 [4]"));
  with("weight.weight.amax_history", full({4}, HUGE_VAL));  // an overflow on record is kept
  auto unknown = state;
  unknown["nowhere.input.scale"] = ones({});
  unknown["nowhere.input.amax_history"] = zeros({4});
  amp::Fp8State target(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
  REQUIRE_THROWS_WITH(target.load_state_dict(layer, unknown), Contains("name no parameter"));
  amp::Fp8State current(amp::Fp8Recipe::current());
  REQUIRE_THROWS_WITH(current.load_state_dict(layer, state), Contains("keeps no amax history"));
}
