// The GPT-2-style decoder (models/gpt.h): names and shapes of its PyTorch
// twin, GPT-2's initialisation, causality, learning on the CPU, bad input.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "mixtape.h"
#include "models/gpt.h"

using namespace mt;

namespace {

Tensor tokens(const std::vector<int64_t>& values, int64_t batch) {
  return from_vector(values, {batch, static_cast<int64_t>(values.size()) / batch});
}

double stddev(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

}  // namespace

// Catches: a parameter named or shaped differently from the PyTorch class in
// the header (its checkpoints would not load with strict=True), an untied
// head adding vocab x width parameters.
TEST_CASE("gpt-tiny has the PyTorch twin's parameter names and shapes, with the head tied", "[models][gpt]") {
  const models::GptConfig c = models::gpt_config("gpt-tiny");
  models::Gpt model(c);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : model.named_parameters()) shapes[name] = p.sizes();
  const int64_t w = c.width;
  std::map<std::string, Shape> want = {
      {"wte.weight", {c.vocab, w}}, {"wpe.weight", {c.context, w}}, {"ln_f.weight", {w}}, {"ln_f.bias", {w}}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      want[p + ln + ".weight"] = {w};
      want[p + ln + ".bias"] = {w};
    }
    want[p + "attn.c_attn.weight"] = {3 * w, w};
    want[p + "attn.c_attn.bias"] = {3 * w};
    want[p + "attn.c_proj.weight"] = {w, w};
    want[p + "attn.c_proj.bias"] = {w};
    want[p + "mlp.c_fc.weight"] = {4 * w, w};
    want[p + "mlp.c_fc.bias"] = {4 * w};
    want[p + "mlp.c_proj.weight"] = {w, 4 * w};
    want[p + "mlp.c_proj.bias"] = {w};
  }
  CHECK(shapes == want);
  CHECK(model.parameter_count() == c.vocab * w + c.context * w + 2 * w + c.layers * (12 * w * w + 13 * w));
  CHECK(models::Gpt(models::gpt_config("gpt-small")).parameter_count() == 10'844'160);
}

// Catches: the fused head (forward_loss) computing another loss than
// cross_entropy over forward()'s logits: the head untied from wte, ln_f
// skipped, targets flattened in another order, grad wte missing the head's
// share; and a model with the fused head turned off still fusing.
TEST_CASE("gpt's fused loss head equals cross_entropy over its logits, with the same gradients", "[models][gpt]") {
  Generator gen(5);
  models::Gpt model(models::gpt_config("gpt-tiny"), &gen);
  std::vector<int64_t> in(2 * 12), out(2 * 12);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int64_t>(i * 37 % 256);
    out[i] = static_cast<int64_t>(i * 91 % 256);
  }
  const Tensor x = tokens(in, 2), y = tokens(out, 2);
  const auto loss_and_grads = [&](bool fused) {
    for (Tensor& p : model.parameters()) p.set_grad(Tensor());
    const Tensor loss =
        fused ? model.forward_loss(x, y) : cross_entropy(model.forward(x).reshape({-1, 256}), y.reshape({-1}));
    loss.backward();
    std::vector<double> values{loss.item<double>()};
    for (const std::string name : {"wte.weight", "wpe.weight", "ln_f.weight", "h.1.mlp.c_fc.weight"}) {
      for (const auto& [n, p] : model.named_parameters()) {
        if (n != name) continue;
        const std::vector<double> g = p.grad().to_vector();
        values.insert(values.end(), g.begin(), g.end());
      }
    }
    return values;
  };
  const std::vector<double> fused = loss_and_grads(true), unfused = loss_and_grads(false);
  REQUIRE(fused.size() == unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == Approx(unfused[i]).margin(1e-7).epsilon(1e-5));
  model.fused_loss_head = false;
  CHECK_FALSE(model.forward_loss(x, y).defined());
}

// Catches: residual projections initialised like every other weight (GPT-2
// scales them by 1/sqrt(2 * layers) so the residual stream does not grow with
// depth), non-zero biases, LayerNorms not starting at the identity.
TEST_CASE("gpt initialisation follows GPT-2", "[models][gpt]") {
  models::GptConfig c{.vocab = 256, .context = 64, .layers = 8, .heads = 4, .width = 128, .moe = {}};
  Generator gen(3);
  models::Gpt model(c, &gen);
  const auto block = std::static_pointer_cast<models::GptBlock>((*model.h)[0]);
  CHECK(stddev(model.wte->weight) == Approx(0.02).epsilon(0.03));
  CHECK(stddev(block->attn->c_attn->weight) == Approx(0.02).epsilon(0.03));
  CHECK(stddev(block->mlp->c_proj->weight) == Approx(0.02 / std::sqrt(16.0)).epsilon(0.03));
  CHECK(stddev(block->attn->c_proj->weight) == Approx(0.02 / std::sqrt(16.0)).epsilon(0.05));
  for (double b : block->mlp->c_fc->bias.to_vector()) CHECK(b == 0.0);
  for (double g : block->ln_1->weight.to_vector()) CHECK(g == 1.0);
}

// Catches: attention that is not causal (a later token changes an earlier
// position's logits), position embeddings not added.
TEST_CASE("gpt is causal: later tokens never change earlier logits", "[models][gpt]") {
  manual_seed(5);
  models::Gpt model(models::gpt_config("gpt-tiny"));
  NoGradGuard no_grad;
  const Tensor a = model.forward(tokens({10, 20, 30, 40, 50, 60}, 1));
  const Tensor b = model.forward(tokens({10, 20, 30, 99, 98, 97}, 1));
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  const size_t per_position = 256;
  for (size_t i = 0; i < 3 * per_position; ++i) REQUIRE(va[i] == vb[i]);
  double changed = 0;
  for (size_t i = 3 * per_position; i < va.size(); ++i) changed = std::max(changed, std::abs(va[i] - vb[i]));
  CHECK(changed > 1e-3);
  // The same token at two positions gives two different outputs (wpe is used).
  const std::vector<double> same = model.forward(tokens({7, 7}, 1)).to_vector();
  CHECK(same[0] != same[per_position]);
}

// Catches: a model that cannot learn (a backward path cut, the tied head's
// two gradients not accumulating, the fused GELU backward wrong).
TEST_CASE("gpt-tiny learns a repeating byte sequence on the CPU in a few dozen steps", "[models][gpt][training]") {
  manual_seed(11);
  models::Gpt model(models::gpt_config("gpt-tiny"));
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  std::vector<int64_t> input, target;
  const int64_t batch = 4, t = 32;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      input.push_back(static_cast<unsigned char>(text[static_cast<size_t>((b * 7 + i) % text.size())]));
      target.push_back(static_cast<unsigned char>(text[static_cast<size_t>((b * 7 + i + 1) % text.size())]));
    }
  }
  const Tensor x = tokens(input, batch), y = from_vector(target, {batch * t});
  optim::AdamWOptions options;
  options.lr = 3e-3;
  optim::AdamW opt(model.parameters(), options);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(model.forward(x).reshape({batch * t, 256}), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(first == Approx(std::log(256.0)).epsilon(0.05));  // uniform at the start
  CHECK(last < 0.5);
}

TEST_CASE("gpt refuses bad input with a clear error", "[models][gpt][errors]") {
  models::Gpt model(models::gpt_config("gpt-tiny"));
  CHECK_THROWS_WITH(model.forward(zeros({1, 65}, kI64)), Catch::Contains("context of 64"));
  CHECK_THROWS_WITH(model.forward(zeros({1, 4})), Catch::Contains("i64 tokens"));
  CHECK_THROWS_WITH(model.forward(full({1, 2}, 256, kI64)), Catch::Contains("embedding"));
  CHECK_THROWS_WITH(
      models::Gpt(models::GptConfig{.vocab = 256, .context = 8, .layers = 1, .heads = 3, .width = 64, .moe = {}}),
      Catch::Contains("do not divide"));
  CHECK_THROWS_WITH(models::gpt_config("gpt-huge"), Catch::Contains("gpt-tiny"));
}
