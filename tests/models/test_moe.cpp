// The mixture-of-experts MLP (models/moe.h): the routing's priority and
// capacity, the layer against a per-token f64 reference, its gradients, the
// router in f32 under every autocast, the losses the router trains by,
// llama-moe-tiny's names and parameter counts, and the sim path.
#include <catch2/catch.hpp>
#include <cmath>

#include "amp/fp8_recipe.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/moe.h"
#include "models/registry.h"

using namespace mt;
using Catch::Contains;

namespace {

std::vector<double> values_of(const Tensor& t) { return t.to(kCPU).to_vector(); }

// The layer, token by token, in f64: softmax, top-k, the capacity filled in
// priority order (every first choice, then every second), SwiGLU or GELU experts.
std::vector<double> reference_moe(models::MoeMlp& moe, const std::vector<double>& x, int64_t n, int64_t d,
                                  int64_t capacity, int64_t* dropped) {
  const bool swiglu = moe.experts->kind() == models::ExpertKind::SwiGlu;
  const models::ExpertMlps& x_ = *moe.experts;
  // SwiGLU: gate, up, down; GELU: c_fc (and its bias), c_proj (and its bias).
  const Tensor first = swiglu ? x_.gate_proj : x_.c_fc, down = swiglu ? x_.down_proj : x_.c_proj;
  const int64_t e = moe.config().experts, k = moe.config().top_k, h = first.size(2);
  const std::vector<double> wr = values_of(moe.gate->weight), wg = values_of(first),
                            wu = swiglu ? values_of(x_.up_proj) : values_of(x_.c_fc_bias), wd = values_of(down),
                            bd = swiglu ? std::vector<double>(size_t(e * d), 0.0) : values_of(x_.c_proj_bias);
  std::vector<std::vector<int64_t>> choice(static_cast<size_t>(n));
  std::vector<std::vector<double>> gate(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> p(static_cast<size_t>(e));
    double top = -1e300, total = 0;
    for (int64_t j = 0; j < e; ++j) {
      double z = 0;
      for (int64_t c = 0; c < d; ++c) z += x[t * d + c] * wr[j * d + c];
      p[j] = z;
      top = std::max(top, z);
    }
    for (double& v : p) total += (v = std::exp(v - top));
    for (double& v : p) v /= total;
    std::vector<int64_t> order(static_cast<size_t>(e));
    for (int64_t j = 0; j < e; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      choice[t].push_back(order[j]);
      gate[t].push_back(k > 1 ? p[order[j]] / chosen : p[order[j]]);
    }
  }
  std::vector<double> y(static_cast<size_t>(n * d), 0.0);
  std::vector<int64_t> load(static_cast<size_t>(e), 0);
  *dropped = 0;
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t ex = choice[t][j];
      if (load[ex]++ >= capacity) {
        ++*dropped;
        continue;
      }
      std::vector<double> hid(static_cast<size_t>(h));
      for (int64_t i = 0; i < h; ++i) {
        double a = 0, b = 0;
        for (int64_t c = 0; c < d; ++c) {
          a += x[t * d + c] * wg[(ex * d + c) * h + i];
          if (swiglu) b += x[t * d + c] * wu[(ex * d + c) * h + i];
        }
        if (swiglu) {
          hid[i] = a / (1 + std::exp(-a)) * b;
        } else {
          a += wu[ex * h + i];  // the bias
          hid[i] = 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
        }
      }
      for (int64_t o = 0; o < d; ++o) {
        double out = bd[ex * d + o];
        for (int64_t i = 0; i < h; ++i) out += hid[i] * wd[(ex * h + i) * d + o];
        y[t * d + o] += gate[t][j] * out;
      }
    }
  }
  return y;
}

models::MoeMlp make_moe(int64_t d, int64_t h, int64_t experts, int64_t top_k, double capacity_factor,
                        models::ExpertKind kind = models::ExpertKind::SwiGlu) {
  return models::MoeMlp(d, h, {.experts = experts, .top_k = top_k, .capacity_factor = capacity_factor}, kind);
}

}  // namespace

// Catches: token-major priority (a token's second choice taking a slot
// before another token's first), a dropped choice still given a slot, ranks
// counted across experts rather than within one.
TEST_CASE("route fills each expert's capacity with first choices before second ones", "[models][moe]") {
  // Tokens 0-2 prefer expert 0, token 3 expert 1; each token's other expert is its second choice.
  const Tensor logits = from_vector(std::vector<double>{3, 1, 3, 1, 3, 1, 1, 3}, {4, 2}, kF32);
  const models::Routing r = models::route(logits, 2, /*capacity=*/2);
  // first choices: t0 -> e0 slot 0, t1 -> e0 slot 1, t2 -> e0 full (dropped: 4), t3 -> e1 slot 2;
  // second choices: t0 -> e1 slot 3, the rest find their expert full.
  CHECK(values_of(r.slots) == std::vector<double>{0, 1, 4, 2, 3, 4, 4, 4});
  CHECK(values_of(r.kept) == std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0});
  CHECK(values_of(r.assigned) == std::vector<double>{4, 4});
  // Top-2 gates are renormalised over the two: here every token's are the same pair.
  const std::vector<double> gates = values_of(r.gates);
  CHECK(gates[0] == Approx(1 / (1 + std::exp(-2.0))));
  CHECK(gates[0] + gates[1] == Approx(1.0));
  CHECK(models::expert_capacity(12, 4, 2, 1.25) == 8);  // ceil(1.25 * 24 / 4)
  CHECK(models::expert_capacity(3, 4, 2, 10.0) == 3);   // never more than the tokens
  CHECK_THROWS_WITH(models::route(logits, 3, 2), Contains("top-3 of 2 experts"));
}

// Catches: a choice dropped at the capacity but its token still sent to the
// expert (or to a neighbour's slot), gates not renormalised, the combine
// reading the wrong slot, evaluation dropping tokens.
TEST_CASE("MoE layer equals a per-token f64 reference, dropped choices add nothing", "[models][moe]") {
  manual_seed(11);
  const int64_t n = 12, d = 8, h = 6;
  for (int64_t top_k : {1, 2}) {
    for (models::ExpertKind kind : {models::ExpertKind::SwiGlu, models::ExpertKind::Gelu}) {
      INFO("top-" << top_k << (kind == models::ExpertKind::Gelu ? " gelu" : " swiglu"));
      models::MoeMlp moe = make_moe(d, h, 4, top_k, /*capacity_factor=*/0.5, kind);
      moe.to(kF64);
      if (kind == models::ExpertKind::Gelu) {  // biases that are not zero, so a lost bias shows
        const NoGradGuard no_grad;
        copy_(moe.experts->c_fc_bias, randn({4, 1, h}, kF64));
        copy_(moe.experts->c_proj_bias, randn({4, 1, d}, kF64));
      }
      const Tensor x = randn({3, 4, d}, kF64);
      const NoGradGuard no_grad;
      for (bool training : {true, false}) {
        INFO((training ? "training" : "eval"));
        moe.train(training);
        const int64_t capacity = training ? models::expert_capacity(n, 4, top_k, 0.5) : n;
        int64_t dropped = 0;
        const std::vector<double> want = reference_moe(moe, x.to_vector(), n, d, capacity, &dropped);
        const Tensor y = moe.forward(x);
        CHECK(y.sizes() == x.sizes());
        const std::vector<double> got = y.to_vector();
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
        CHECK(worst < 1e-12);
        if (training) {
          CHECK(dropped > 0);  // the capacity bit
          const models::RouterStatistics s = moe.take_statistics();
          CHECK(s.tokens == n);
          CHECK(s.dropped_share == Approx(double(dropped) / double(n * top_k)));
        } else {
          CHECK(dropped == 0);
        }
      }
    }
  }
}

// Catches: a gradient lost in the dispatch (index_add) or the combine
// (index_select), the gates' gradient not reaching the router, the
// load-balancing or z-loss not differentiable in the router's weight.
TEST_CASE("MoE layer gradients, auxiliary losses included, pass gradcheck", "[models][moe]") {
  manual_seed(12);
  models::MoeMlp moe = make_moe(4, 5, 3, 2, 1.0);
  moe.to(kF64);
  const Tensor x = randn({6, 4}, kF64).requires_grad_();
  std::vector<Tensor> inputs = moe.parameters();
  inputs.insert(inputs.begin(), x);
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        const Tensor y = moe.forward(in[0]);
        return cat({y.reshape({-1}), mul(moe.auxiliary_loss(), 10.0).reshape({1})}, 0);
      },
      inputs);
  INFO(r.message);
  CHECK(r.ok);
}

// Catches: the router's GEMM in bf16 or fp16 under autocast, or in FP8
// inside an FP8 region (its policy row says f32: the top-k choice must not
// move with a lower-precision rounding).
TEST_CASE("the router's logits are f32 under bf16, fp16 and FP8", "[models][moe][autocast]") {
  manual_seed(13);
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO(device.str());
    const Tensor x = randn({16, 256}).to(device), w = randn({4, 256}).to(device);
    auto check = [&](const Tensor& logits, const char* what, const Tensor& input) {
      INFO(what);
      const std::vector<double> want = matmul(input.to(kF64), w.to(kF64).t()).to(kCPU).to_vector();
      CHECK(logits.dtype() == kF32);
      const std::vector<double> got = values_of(logits);
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      CHECK(worst < 1e-3);  // f32 over K=256 of N(0,1) products: ~1e-5; bf16 inputs: ~0.5
    };
    for (DType low : {kBF16, kF16}) {
      if (device.is_cpu() && low == kF16) continue;  // CPU autocast is bf16
      const amp::Autocast autocast(device, low);
      check(router_logits(x, w), low == kBF16 ? "bf16 autocast" : "fp16 autocast", x);
      check(router_logits(x.to(low), w), "a low-precision input", x.to(low));
    }
    amp::Fp8State state(amp::Fp8Recipe::current());
    const amp::Autocast autocast(device, kBF16);
    const amp::Fp8Autocast region(state);
    check(router_logits(x, w), "fp8 region", x);
    CHECK(state.linears() == 0);
  }
}

// Catches: MoE models whose checkpoint names differ from the router/expert
// layout, activated parameters counting every expert (or none), and a loss
// whose gradient leaves out the router's losses (or whose value adds them).
TEST_CASE("llama-moe-tiny: names, total vs activated parameters, router losses in the gradient", "[models][moe]") {
  manual_seed(14);
  auto model = std::dynamic_pointer_cast<models::Llama>(models::make_model("llama-moe-tiny"));
  REQUIRE(model != nullptr);
  const auto state = model->state_dict();
  CHECK(state.at("model.layers.0.block_sparse_moe.gate.weight").sizes() == Shape{4, 64});
  CHECK(state.at("model.layers.1.block_sparse_moe.experts.gate_proj").sizes() == Shape{4, 64, 176});
  CHECK(state.at("model.layers.1.block_sparse_moe.experts.down_proj").sizes() == Shape{4, 176, 64});
  CHECK(state.count("model.layers.0.mlp.gate_proj.weight") == 0);
  const models::ParameterCounts counts = models::parameter_counts(*model);
  const int64_t experts_per_layer = 3 * 4 * 64 * 176;
  CHECK(counts.total == model->parameter_count());
  CHECK(counts.activated == counts.total - 2 * experts_per_layer / 2);  // 2 of 4 experts in each of 2 layers
  const models::ParameterCounts dense = models::parameter_counts(*models::make_model("llama-tiny"));
  CHECK(dense.activated == dense.total);

  std::vector<int64_t> ids;
  for (int i = 0; i < 2 * 17; ++i) ids.push_back((i * 11 + 3) % 256);
  const Tensor tokens = from_vector(ids, {2, 17});
  const Tensor inputs = tokens.narrow(1, 0, 16), targets = tokens.narrow(1, 1, 16).contiguous();
  const Tensor& router = model->model->layers->at<models::LlamaLayer>(0)->block_sparse_moe->gate->weight;
  auto router_grad = [&](const std::function<Tensor()>& loss) {
    model->zero_grad();
    loss().backward();
    return values_of(router.grad());
  };
  const Tensor loss = model->forward_loss(inputs, targets);
  const double ce = cross_entropy(model->forward(inputs).reshape({32, 256}), targets.reshape({32})).item<double>();
  CHECK(loss.item<double>() == Approx(ce).epsilon(1e-6));  // the value is the cross-entropy
  const std::vector<double> both = router_grad([&] { return model->forward_loss(inputs, targets); });
  const std::vector<double> ce_only = router_grad([&] {
    return cross_entropy(model->forward(inputs).reshape({32, 256}), targets.reshape({32}));
  });
  const std::vector<double> aux_only = router_grad([&] {
    model->forward(inputs);
    return models::moe_auxiliary_loss(*model);
  });
  double aux_size = 0, worst = 0;
  for (size_t i = 0; i < both.size(); ++i) {
    aux_size = std::max(aux_size, std::abs(aux_only[i]));
    worst = std::max(worst, std::abs(both[i] - ce_only[i] - aux_only[i]));
  }
  CHECK(aux_size > 1e-6);
  CHECK(worst < 1e-6 + 1e-3 * aux_size);
  CHECK(models::make_model("llama-tiny")->forward_loss(inputs, targets).defined() == false);
}

// Catches: gpt-moe-tiny's experts missing GPT-2's initialisation (biases
// zero, the residual projection scaled down), or top-2 where Switch's top-1
// was asked for.
TEST_CASE("gpt-moe-tiny: top-1 GELU experts with GPT-2's initialisation", "[models][moe]") {
  manual_seed(16);
  auto model = std::dynamic_pointer_cast<models::Gpt>(models::make_model("gpt-moe-tiny"));
  REQUIRE(model != nullptr);
  const auto state = model->state_dict();
  CHECK(state.at("h.0.moe.gate.weight").sizes() == Shape{4, 64});
  CHECK(state.at("h.1.moe.experts.c_fc").sizes() == Shape{4, 64, 256});
  CHECK(state.at("h.1.moe.experts.c_proj").sizes() == Shape{4, 256, 64});
  const std::vector<double> bias = values_of(state.at("h.0.moe.experts.c_fc_bias"));
  CHECK(*std::max_element(bias.begin(), bias.end()) == 0.0);
  CHECK(*std::min_element(bias.begin(), bias.end()) == 0.0);
  const double residual_std = values_of(sqrt(var(state.at("h.0.moe.experts.c_proj"))))[0];
  CHECK(residual_std == Approx(0.02 / 2.0).epsilon(0.05));  // 0.02 / sqrt(2 * layers)
  CHECK(model->h->at<models::GptBlock>(0)->moe->config().top_k == 1);
  const models::ParameterCounts counts = models::parameter_counts(*model);
  CHECK(counts.total - counts.activated == 2 * 3 * (64 * 256 + 256 + 256 * 64 + 64));  // 3 of 4 experts idle
}

// Catches: the dispatch or combine differing on the CUDA path (sim), and
// gradients that change from run to run (an unordered accumulation).
TEST_CASE("MoE layer on sim matches the CPU, and its gradients repeat bit for bit", "[models][moe][sim]") {
  manual_seed(15);
  models::MoeMlp cpu = make_moe(16, 24, 4, 2, 1.0);
  models::MoeMlp sim = make_moe(16, 24, 4, 2, 1.0);
  sim.load_state_dict(cpu.state_dict());
  sim.to(test::kCudaPath);
  const Tensor x = randn({2, 10, 16});
  auto run = [](models::MoeMlp& m, const Tensor& input) {
    m.zero_grad();
    const Tensor y = m.forward(input);
    sum(mul(y, y)).backward();
    std::vector<double> out = values_of(y);
    for (const Tensor& p : m.parameters()) {
      const std::vector<double> g = values_of(p.grad());
      out.insert(out.end(), g.begin(), g.end());
    }
    return out;
  };
  const std::vector<double> want = run(cpu, x);
  const std::vector<double> first = run(sim, x.to(test::kCudaPath)), second = run(sim, x.to(test::kCudaPath));
  CHECK(first == second);
  REQUIRE(first.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(first[i] - want[i]));
  CHECK(worst < 1e-4);
}
