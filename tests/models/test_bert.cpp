// The BERT-style encoder (models/bert.h): names and shapes of its PyTorch
// twin, padding that is never attended to, learning, checkpointing, bad input.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "mixtape.h"
#include "models/bert.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;

namespace {

// [CLS] + the bytes of `text` + [PAD] up to `length`.
std::vector<int64_t> passage(const std::string& text, size_t length) {
  std::vector<int64_t> tokens{models::kBertCls};
  for (const char c : text) tokens.push_back(static_cast<unsigned char>(c));
  tokens.resize(length, models::kBertPad);
  return tokens;
}

Tensor batch_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return from_vector(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.front().size())});
}

}  // namespace

// Catches: a parameter named or shaped differently from the PyTorch class in
// the header (its checkpoints would not load with strict=True).
TEST_CASE("bert-tiny has the PyTorch twin's parameter names and shapes", "[models][bert]") {
  const models::BertConfig c = models::bert_config("bert-tiny", 15);
  models::Bert model(c);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : model.named_parameters()) shapes[name] = p.sizes();
  const int64_t w = c.width;
  std::map<std::string, Shape> want = {{"tok_emb.weight", {258, w}},   {"pos_emb.weight", {128, w}},
                                       {"emb_ln.weight", {w}},         {"emb_ln.bias", {w}},
                                       {"pooler.weight", {w, w}},      {"pooler.bias", {w}},
                                       {"classifier.weight", {15, w}}, {"classifier.bias", {15}}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    want[p + "attn.qkv.weight"] = {3 * w, w};
    want[p + "attn.qkv.bias"] = {3 * w};
    want[p + "attn.proj.weight"] = {w, w};
    want[p + "attn.proj.bias"] = {w};
    want[p + "mlp.fc.weight"] = {4 * w, w};
    want[p + "mlp.fc.bias"] = {4 * w};
    want[p + "mlp.proj.weight"] = {w, 4 * w};
    want[p + "mlp.proj.bias"] = {w};
    for (const char* ln : {"ln_1", "ln_2"}) {
      want[p + ln + ".weight"] = {w};
      want[p + ln + ".bias"] = {w};
    }
  }
  CHECK(shapes == want);
  CHECK(model.parameter_count() == 464'655);
  // BERT-base's shape over the 258-token byte vocabulary, context 512 (86,239,490 parameters with 2
  // classes, counted once by building it: too slow to build in every test run).
  const models::BertConfig base = models::bert_config("bert-base", 2);
  CHECK((base.layers == 12 && base.heads == 12 && base.width == 768 && base.context == 512 && base.vocab == 258));
}

// Catches: the key-padding mask not applied (padding changes the logits), a
// mask that hides real tokens, or the pooler reading a position other than
// [CLS]; and attention that is causal instead of bidirectional.
TEST_CASE("bert never attends to padding and reads the whole passage", "[models][bert]") {
  manual_seed(4);
  models::Bert model(models::bert_config("bert-tiny", 3));
  model.eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> short_passage = passage("jury said", 16);
  std::vector<int64_t> other_padding = short_passage;
  other_padding.resize(24, models::kBertPad);  // more padding: the same passage
  const std::vector<double> a = model.forward(batch_of({short_passage})).to_vector();
  const std::vector<double> b = model.forward(batch_of({other_padding})).to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
  // The last real byte changes the [CLS] output: attention looks forward.
  std::vector<int64_t> changed = short_passage;
  changed[9] = 'x';
  const std::vector<double> c = model.forward(batch_of({changed})).to_vector();
  double delta = 0;
  for (size_t i = 0; i < a.size(); ++i) delta = std::max(delta, std::abs(a[i] - c[i]));
  CHECK(delta > 1e-4);
  // Rows of a batch do not see each other.
  const std::vector<double> both = model.forward(batch_of({short_passage, changed})).to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(both[i] == Approx(a[i]).margin(1e-6));
}

// Catches: the fused attention kernels (the CUDA path's implementation of
// the encoder's key-padding attention) reading the padding mask per head
// instead of per batch row, or attending to padding in backward.
TEST_CASE("bert on the CUDA path (fused attention with key padding) matches the CPU forward and backward",
          "[models][bert][sim]") {
  models::BertConfig config = models::bert_config("bert-tiny", 3);
  config.dropout = 0;  // dropout would send attention to the reference path
  const Tensor tokens =
      batch_of({passage("the jury said", 24), passage("a grand jury of the county", 24), passage("it", 24)});
  const Tensor labels = from_vector(std::vector<int64_t>{0, 2, 1}, {3});
  std::vector<std::vector<double>> results;
  for (const Device device : {kCPU, test::kCudaPath}) {
    Generator gen(8);
    models::Bert model(config, &gen);
    model.to(device);
    const Tensor logits = model.forward(tokens.to(device));
    cross_entropy(logits, labels.to(device)).backward();
    std::vector<double> values = logits.to(kCPU).to_vector();
    for (const Tensor& p : model.parameters()) {
      for (double g : p.grad().to(kCPU).to_vector()) values.push_back(g);
    }
    results.push_back(values);
  }
  REQUIRE(results[0].size() == results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    INFO("value " << i);
    CHECK(results[1][i] == Approx(results[0][i]).margin(2e-5).epsilon(1e-4));
  }
}

// Catches: a model that cannot learn (a backward path cut through the pooler,
// the mask or the fused GELU), dropout left on in eval.
TEST_CASE("bert learns to tell two kinds of passage apart on the CPU", "[models][bert][training]") {
  manual_seed(12);
  models::Bert model(models::bert_config("bert-tiny", 2));
  const Tensor x =
      batch_of({passage("the the the", 16), passage("1 2 3 4 5", 16), passage("a the an", 16), passage("7 8 9", 16)});
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 0, 1}, {4});
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{.lr = 1e-3});
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
  model.eval();
  NoGradGuard no_grad;
  CHECK(argmax(model.forward(x), 1).to_vector() == y.to_vector());
  CHECK(model.forward(x).to_vector() == model.forward(x).to_vector());  // no dropout in eval
}

// Catches: checkpointed layers that replay a different dropout stream or
// lose the padding mask (the gradients would differ).
TEST_CASE("a checkpointed bert gives the same gradients, dropout included", "[models][bert][checkpoint]") {
  const Tensor x = batch_of({passage("jury said", 12), passage("an investigation of", 12)});
  const Tensor y = from_vector(std::vector<int64_t>{1, 0}, {2});
  std::vector<std::vector<double>> grads[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    Generator init(9);
    models::Bert model(models::bert_config("bert-tiny", 2), &init);
    model.checkpoint_activations = checkpointed == 1;
    manual_seed(21);  // the dropout stream
    cross_entropy(model.forward(x), y).backward();
    for (const Tensor& p : model.parameters()) grads[checkpointed].push_back(p.grad().to_vector());
  }
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("bert refuses bad input with a clear error", "[models][bert][errors]") {
  models::Bert model(models::bert_config("bert-tiny", 2));
  CHECK_THROWS_WITH(model.forward(zeros({1, 129}, kI64)), Catch::Contains("context of 128"));
  CHECK_THROWS_WITH(model.forward(zeros({1, 4})), Catch::Contains("i64 tokens"));
  CHECK_THROWS_WITH(model.forward(full({1, 2}, 258, kI64)), Catch::Contains("embedding"));
  CHECK_THROWS_WITH(models::bert_config("bert-huge", 2), Catch::Contains("bert-tiny"));
  CHECK_THROWS_WITH(models::bert_config("bert-tiny", 0), Catch::Contains("classes"));
  models::BertConfig odd = models::bert_config("bert-tiny", 2);
  odd.heads = 3;
  CHECK_THROWS_WITH(models::Bert(odd), Catch::Contains("do not divide"));
}
