// The Llama-style decoder (models/llama.h): HF's parameter names, RoPE's
// pairing and relative-position property, grouped-query attention, the f32
// norms and rotation under autocast, and that it learns. One training step
// against its PyTorch twin: tests/parity (model llama-tiny).
#include <catch2/catch.hpp>
#include <cmath>

#include "mixtape.h"
#include "models/llama.h"
#include "models/registry.h"

using namespace mt;
using Catch::Contains;

// Catches: names a LlamaForCausalLM state dict would not load into, biases
// where Llama has none, the K/V projections not narrowed to the KV heads.
TEST_CASE("llama-tiny has HF Llama's parameter names and shapes", "[models][llama]") {
  const auto model = models::make_model("llama-tiny");
  const auto state = model->state_dict();
  CHECK(state.at("model.embed_tokens.weight").sizes() == Shape{256, 64});
  CHECK(state.at("model.layers.1.self_attn.q_proj.weight").sizes() == Shape{64, 64});
  CHECK(state.at("model.layers.1.self_attn.k_proj.weight").sizes() == Shape{32, 64});  // 2 KV heads of 16
  CHECK(state.at("model.layers.0.mlp.gate_proj.weight").sizes() == Shape{176, 64});
  CHECK(state.at("model.layers.0.post_attention_layernorm.weight").sizes() == Shape{64});
  CHECK(state.at("model.norm.weight").sizes() == Shape{64});
  CHECK(state.at("lm_head.weight").sizes() == Shape{256, 64});
  for (const auto& [name, t] : state) CHECK(name.find("bias") == std::string::npos);
  CHECK(model->parameter_count() == 125248);
  // The vocabulary grows to a tokenizer's, as the GPTs' does.
  CHECK(models::make_model("llama-tiny", 50257)->state_dict().at("lm_head.weight").size(0) == 50257);
}

// Catches: RoPE pairing the wrong elements (interleaved instead of the two
// halves), angles of the wrong frequency, and a rotation that does not make
// attention scores depend on the distance between positions only.
TEST_CASE("RoPE rotates the two halves of each head by position", "[models][llama][rope]") {
  const int64_t d = 8, positions = 6;
  const models::RopeTables rope = models::rope_tables(positions, d, 10000.0, kCPU);
  // Element i pairs with i + d/2, rotated by angle t * 10000^(-2i/d).
  const Tensor x = randn({1, 1, positions, d}, kF64);
  const std::vector<double> in = x.to_vector(), out = models::apply_rope(x, rope).to_vector();
  for (int64_t t = 0; t < positions; ++t) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = double(t) * std::pow(10000.0, -2.0 * double(i) / double(d));
      const double a = in[t * d + i], b = in[t * d + i + d / 2];
      CHECK(out[t * d + i] == Approx(a * std::cos(angle) - b * std::sin(angle)).margin(1e-6));
      CHECK(out[t * d + i + d / 2] == Approx(b * std::cos(angle) + a * std::sin(angle)).margin(1e-6));
    }
  }
  // <rope(q, m), rope(k, n)> depends on m - n only: the same q and k at every position.
  const Tensor q = randn({1, 1, 1, d}, kF64).expand({1, 1, positions, d});
  const Tensor k = randn({1, 1, 1, d}, kF64).expand({1, 1, positions, d});
  const std::vector<double> scores =
      matmul(models::apply_rope(q, rope), models::apply_rope(k, rope).transpose(-2, -1)).to_vector();
  for (int64_t m = 1; m < positions; ++m) {
    CHECK(scores[m * positions + (m - 1)] == Approx(scores[1 * positions + 0]).margin(1e-5));
  }
}

// Catches: RMSNorm's statistic or RoPE's rotation run in bf16 under autocast
// (the policy and the kernel say f32), and a model that cannot learn.
TEST_CASE("llama-tiny keeps norms and RoPE in f32 under bf16 autocast and learns", "[models][llama]") {
  manual_seed(3);
  auto model = std::dynamic_pointer_cast<models::Llama>(models::make_model("llama-tiny"));
  REQUIRE(model != nullptr);
  const Tensor x = randn({2, 8, 64});
  {
    const amp::Autocast autocast(kCPU, kBF16);
    const auto& layer = model->model->layers->at<models::LlamaLayer>(0);
    const Tensor normed = layer->input_layernorm->forward(x.to(kBF16));
    CHECK(normed.dtype() == kF32);
    // RoPE rotates in f32 and rounds once to q's dtype (a bf16 rotation would round each product).
    const models::RopeTables rope = models::rope_tables(8, 16, 10000.0, kCPU);
    const Tensor q = randn({2, 4, 8, 16}).to(kBF16);
    const Tensor rotated = models::apply_rope(q, rope);
    CHECK(rotated.dtype() == kBF16);
    CHECK(rotated.to_vector() == models::apply_rope(q.to(kF32), rope).to(kBF16).to_vector());
  }
  // A repeating sequence is learned within a few dozen steps.
  std::vector<int64_t> pattern;
  for (int i = 0; i < 2 * 33; ++i) pattern.push_back((i * 7) % 13);
  const Tensor tokens = from_vector(pattern, {2, 33});
  const Tensor inputs = tokens.narrow(1, 0, 32), targets = tokens.narrow(1, 1, 32).contiguous();
  optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    const Tensor loss = cross_entropy(model->forward(inputs).reshape({64, 256}), targets.reshape({64}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.2 * first);
  CHECK_THROWS_WITH(model->forward(zeros({1, 65}, kI64)), Contains("T <= the context 64"));
}

// Catches: cached generation rotating the new keys at position 0 instead of
// their own, the mask of several new queries after a past, and the cache
// keeping repeated K/V heads that do not line up with the new ones.
TEST_CASE("llama's key/value cache gives the logits of the whole-prefix forward", "[models][llama][kv-cache]") {
  manual_seed(5);
  auto model = std::dynamic_pointer_cast<models::Llama>(models::make_model("llama-tiny"));
  model->to(kF64);
  model->eval();
  const NoGradGuard no_grad;
  std::vector<int64_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % 256);
  const Tensor all = from_vector(ids, {1, 12});
  const std::vector<double> want = model->forward(all).to_vector();
  models::KvCache cache;
  std::vector<double> got = model->forward(all.narrow(1, 0, 5), cache).to_vector();  // a prefix of 5
  for (int64_t start : {5, 8}) {  // then 3 tokens at once, then 4
    const int64_t n = start == 5 ? 3 : 4;
    const std::vector<double> more = model->forward(all.narrow(1, start, n).contiguous(), cache).to_vector();
    got.insert(got.end(), more.begin(), more.end());
  }
  CHECK(cache.length() == 12);
  CHECK(cache.keys[0].size(1) == 2);  // the 2 KV heads, not the 4 repeated
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  CHECK(worst < 1e-10);
}
