// `mixtape generate`: the key/value cache, sampling, the window past the
// context, and the checks on prompts and checkpoints.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/generator.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tools/train/generate.h"

using namespace mt;
using Catch::Contains;

namespace {

std::shared_ptr<models::Gpt> f64_gpt_tiny() {
  Generator gen(11);
  auto model = std::make_shared<models::Gpt>(models::gpt_config("gpt-tiny"), &gen);
  model->to(kF64);  // f64: the cached and uncached paths then agree far below any gap between two logits
  return model;
}

std::vector<int64_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace

// Catches: cached keys/values at the wrong positions (positions restarting at
// 0, a mask that hides the past or shows the future), and a cache that is not
// extended by each call.
TEST_CASE("the key/value cache gives the logits of the whole-prefix forward", "[generate][kv-cache]") {
  auto model = f64_gpt_tiny();
  model->eval();
  NoGradGuard no_grad;
  std::vector<int64_t> tokens = bytes("The jury said the election was conducted");
  const auto t = static_cast<int64_t>(tokens.size());
  const Tensor all = from_vector(tokens, {1, t}, kI64);
  const Tensor whole = model->forward(all);
  models::KvCache cache;
  // A prefill of 5 tokens, then 3 at once (a mask with a past), then one at a time.
  Tensor pieces = model->forward(all.narrow(1, 0, 5), cache);
  CHECK(cache.length() == 5);
  pieces = cat({pieces, model->forward(all.narrow(1, 5, 3), cache)}, 1);
  CHECK(cache.length() == 8);
  for (int64_t i = 8; i < t; ++i) {
    pieces = cat({pieces, model->forward(all.narrow(1, i, 1), cache)}, 1);
    CHECK(cache.length() == i + 1);
  }
  CHECK(max(abs(sub(pieces, whole))).item<double>() < 1e-12);
  CHECK(cache.keys.size() == 2);
  CHECK(cache.keys[0].sizes() == Shape{1, 2, t, 32});
  CHECK_THROWS_WITH(model->forward(from_vector(std::vector<int64_t>(64 - t + 1, 1), {1, 64 - t + 1}, kI64), cache),
                    Contains("cached positions") && Contains("context of 64"));
}

// Catches: a cache that drifts from the uncached model over many steps, and a
// window restart past the context that the two paths handle differently.
TEST_CASE("greedy generation with the cache gives the tokens of generation without it", "[generate][kv-cache]") {
  auto model = f64_gpt_tiny();
  tools::GenerateOptions options;
  options.temperature = 0;
  options.tokens = 100;  // the prompt and 100 tokens pass the context of 64: the window restarts
  const std::vector<int64_t> prompt = bytes("The jury");
  const auto cached = tools::generate(*model, prompt, options, kCPU);
  options.use_cache = false;
  const auto uncached = tools::generate(*model, prompt, options, kCPU);
  REQUIRE(cached.size() == prompt.size() + 100);
  CHECK(std::equal(prompt.begin(), prompt.end(), cached.begin()));
  CHECK(cached == uncached);
}

// Catches: sampling that ignores the seed or is not reproducible, top-k that
// lets other tokens through, and a temperature that is not applied.
TEST_CASE("sampling follows the seed, top-k and the temperature", "[generate]") {
  auto model = f64_gpt_tiny();
  tools::GenerateOptions options;
  options.tokens = 40;
  options.seed = 1;
  const std::vector<int64_t> prompt = bytes("A");
  const auto a = tools::generate(*model, prompt, options, kCPU);
  CHECK(tools::generate(*model, prompt, options, kCPU) == a);
  options.seed = 2;
  CHECK(tools::generate(*model, prompt, options, kCPU) != a);
  // top-k 1 is greedy, whatever the temperature.
  options.top_k = 1;
  options.temperature = 5;
  const auto top1 = tools::generate(*model, prompt, options, kCPU);
  options.top_k = 0;
  options.temperature = 0;
  CHECK(tools::generate(*model, prompt, options, kCPU) == top1);
  // A tiny temperature is greedy too.
  options.temperature = 1e-6;
  CHECK(tools::generate(*model, prompt, options, kCPU) == top1);
}

// Catches: generation on the CUDA path reading the cache from the wrong device or dtype.
TEST_CASE("generation on sim gives the CPU's greedy tokens", "[generate][sim]") {
  Generator gen(11);
  models::Gpt cpu_model(models::gpt_config("gpt-tiny"), &gen);
  Generator gen2(11);
  models::Gpt sim_model(models::gpt_config("gpt-tiny"), &gen2);
  sim_model.to(kSIM);
  tools::GenerateOptions options;
  options.temperature = 0;
  options.tokens = 6;
  const auto prompt = bytes("The");
  CHECK(tools::generate(sim_model, prompt, options, kSIM) == tools::generate(cpu_model, prompt, options, kCPU));
}

// Catches: prompts that crash or read out of bounds instead of a clear error.
TEST_CASE("generate refuses empty, too long and out-of-vocabulary prompts and bad options", "[generate][errors]") {
  auto model = f64_gpt_tiny();
  tools::GenerateOptions options;
  options.tokens = 1;
  CHECK_THROWS_WITH(tools::generate(*model, {}, options, kCPU), Contains("empty"));
  CHECK_THROWS_WITH(tools::generate(*model, std::vector<int64_t>(65, 1), options, kCPU),
                    Contains("65 tokens") && Contains("context of 64"));
  CHECK_THROWS_WITH(tools::generate(*model, {1, 256}, options, kCPU), Contains("256") && Contains("vocabulary"));
  CHECK_THROWS_WITH(tools::generate(*model, {-1}, options, kCPU), Contains("vocabulary"));
  options.temperature = -1;
  CHECK_THROWS_WITH(tools::generate(*model, {1}, options, kCPU), Contains("temperature"));
}

// Catches: a model that is not a decoder (models/decoder.h) reaching the
// generation loop, which reads its vocabulary and context through the
// decoder interface.
TEST_CASE("generate refuses a model that is not a decoder", "[generate][errors]") {
  models::Mlp mlp(784, 10);
  CHECK_THROWS_WITH(tools::generate(mlp, {1}, tools::GenerateOptions{}, kCPU),
                    Contains("'mlp' is not a decoder-only language model"));
}

// Bug caught: generate printed nothing until its last token (a long run
// showed nothing until it ended or was killed). Each token reaches the
// caller as soon as it is sampled: the callback zeroes the weights after the
// first token, and only a generation that is still running sees that -- the
// later greedy tokens come from all-equal logits (token 0), where tokens
// handed over at the end would all be the untouched model's.
TEST_CASE("generate hands each token to the caller as it is made, not at the end", "[generate]") {
  auto model = f64_gpt_tiny();
  tools::GenerateOptions options;
  options.temperature = 0;
  options.tokens = 6;
  const std::vector<int64_t> prompt = bytes("The jury");
  const std::vector<int64_t> untouched = tools::generate(*model, prompt, options, kCPU);
  REQUIRE(std::count(untouched.begin() + 8, untouched.end(), 0) == 0);  // the model's own tokens are not 0

  std::vector<int64_t> streamed;
  options.on_token = [&](int64_t token) {
    streamed.push_back(token);
    NoGradGuard no_grad;
    for (const Tensor& p : model->parameters()) fill_(p, 0.0);
  };
  const std::vector<int64_t> tokens = tools::generate(*model, prompt, options, kCPU);
  REQUIRE(streamed.size() == 6);
  CHECK(std::vector<int64_t>(tokens.begin() + 8, tokens.end()) == streamed);  // every new token, in order
  CHECK(streamed[0] == untouched[8]);
  CHECK(std::vector<int64_t>(streamed.begin() + 1, streamed.end()) == std::vector<int64_t>(5, 0));
}

// Bug caught: --tokens 1000000000 ran until killed. A count above the cap
// (--max-tokens) is refused before any token is made, naming both.
TEST_CASE("generate refuses more tokens than the --max-tokens cap", "[generate][errors]") {
  auto model = f64_gpt_tiny();
  tools::GenerateOptions options;
  options.tokens = 1000000000;
  int64_t made = 0;
  options.on_token = [&](int64_t) { ++made; };
  CHECK_THROWS_WITH(tools::generate(*model, bytes("The jury"), options, kCPU),
                    Contains("--tokens 1000000000") && Contains("--max-tokens 100000"));
  CHECK(made == 0);
  options.tokens = 3;
  options.max_tokens = 3;
  CHECK(tools::generate(*model, bytes("The jury"), options, kCPU).size() == 11);
}
