// The text tasks of the trainer: token windows and gpt-tiny on the Brown
// corpus's bytes (language modelling), genre passages and bert-tiny (text
// classification), their evaluation, checkpoints and flags.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/safetensors.h"
#include "tools/data/brown.h"
#include "tools/data/loader.h"
#include "tools/data/text.h"
#include "tools/train/generate.h"
#include "tools/train/trainer.h"

using namespace mt;
using Catch::Contains;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mixtape_lm_test_" + name)).string();
}

// One epoch of `model` on Brown's first `windows` training windows of
// `context` tokens in batches of `batch`, evaluated on `test_windows`.
tools::TrainConfig brown_epoch(const std::string& model, tools::Precision precision, int64_t context, int64_t windows,
                               int64_t test_windows, int64_t batch) {
  tools::TrainConfig c;
  c.model = model;
  c.data.dataset = "brown";
  c.data.context = context;
  c.data.train_limit = windows;
  c.data.test_limit = test_windows;
  c.precision.mode = precision;
  c.report.progress = false;
  c.batch = batch;
  c.epochs = 1;
  return c;
}

// A short gpt-tiny run on synthetic tokens (no corpus, a second or two).
tools::TrainConfig synthetic_lm_config() {
  tools::TrainConfig c;
  c.model = "gpt-tiny";
  c.data.dataset = "synthetic-tokens";
  c.precision.mode = tools::Precision::Fp32;
  c.report.progress = false;
  c.data.train_limit = 64;
  c.data.test_limit = 16;
  c.data.context = 16;
  c.batch = 8;
  c.epochs = 1;
  return c;
}

// `steps` bf16 steps of `model` on sim over synthetic tokens: batches of 2 windows of 8.
tools::TrainConfig sim_lm_config(const std::string& model, int64_t steps) {
  tools::TrainConfig c = synthetic_lm_config();
  c.model = model;
  c.device = kSIM;
  c.precision.mode = tools::Precision::Bf16;
  c.data.train_limit = 8;
  c.data.test_limit = 2;
  c.batch = 2;
  c.data.context = 8;
  c.max_steps = steps;
  return c;
}

struct Sink {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~Sink() { std::fclose(file); }
};

}  // namespace

// Catches: targets that are not the inputs shifted by one (a model that sees
// its own target, or predicts the current token), windows that overlap or
// drop tokens, and a stream too short for one window read out of bounds.
TEST_CASE("byte windows: the targets are the inputs shifted by one, every token once", "[data][text]") {
  const data::TensorDataset d = data::byte_windows("abcdefghij", 3, "test");
  REQUIRE(d.size() == 3);  // (10 - 1) / 3
  CHECK(d.classes == 256);
  CHECK(d.inputs.to_vector() == std::vector<double>{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'});
  CHECK(d.targets.to_vector() == std::vector<double>{'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'});
  CHECK(data::byte_windows("\xff\x80x", 2, "test").inputs.to_vector() == std::vector<double>{255, 128});
  CHECK_THROWS_WITH(data::byte_windows("abc", 3, "brown (validation)"),
                    Contains("brown (validation)") && Contains("one window"));
  CHECK_THROWS_WITH(data::byte_windows("abc", 0, "test"), Contains("positive"));
}

// Catches: a synthetic stream that is not reproducible, held-out windows that
// repeat the training windows, and a stream a model could not learn from
// (tokens drawn independently instead of from the chain).
TEST_CASE("synthetic tokens: one chain, two reproducible streams", "[data][text]") {
  const data::TensorDataset a = data::synthetic_tokens(32, 8, 50, 7), b = data::synthetic_tokens(32, 8, 50, 7);
  const data::TensorDataset held_out = data::synthetic_tokens(32, 8, 50, 7, 1);
  CHECK(a.inputs.to_vector() == b.inputs.to_vector());
  CHECK(a.inputs.to_vector() != held_out.inputs.to_vector());
  // Every token has at most four successors, in both streams.
  std::map<int64_t, std::set<int64_t>> successors;
  for (const data::TensorDataset* d : {&a, &held_out}) {
    const std::vector<double> in = d->inputs.to_vector(), next = d->targets.to_vector();
    for (size_t i = 0; i < in.size(); ++i)
      successors[static_cast<int64_t>(in[i])].insert(static_cast<int64_t>(next[i]));
  }
  for (const auto& [token, next] : successors) CHECK(next.size() <= 4);
}

// Catches: the language-model loss taken over the wrong axis or over one
// position only, a broken causal mask (a model that reads the next byte
// reaches far below the bound), and f16/bf16 training that stalls. The bounds:
// a unigram model of Brown's bytes scores 3.09 nats/byte on the validation
// documents and an add-one bigram model 2.41.
TEST_CASE("gpt-tiny learns Brown's bytes in fp32, bf16 and fp16", "[e2e][lm][slow]") {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    INFO(precision);
    tools::TrainConfig c;
    c.model = "gpt-tiny";
    c.data.dataset = "brown";
    c.precision.mode = tools::parse_precision(precision);
    c.report.progress = false;
    c.max_steps = 200;
    c.batch = 32;
    c.optim.lr = 3e-3;
    c.optim.warmup = 20;
    c.optim.schedule = tools::ScheduleKind::Constant;
    c.data.test_limit = 200;
    Sink sink;
    const tools::TrainSummary s = tools::train(c, sink.file);
    WARN(precision << ": validation loss " << s.validation_loss << " nats/byte after " << s.steps << " steps, "
                   << s.tokens_per_second << " tokens/s, skipped " << s.skipped_steps);
    CHECK(s.language_model);
    CHECK(s.steps == 200);
    CHECK(s.validation_loss < 2.8);
    CHECK(s.validation_loss > 1.8);
    CHECK(s.perplexity == Approx(std::exp(s.validation_loss)));
    CHECK(s.skipped_steps < 10);
  }
}

// Catches: --eval-every ignored or evaluating at the wrong steps, and a
// training loss that does not fall on a learnable stream.
TEST_CASE("a language-model run evaluates every N steps and learns the synthetic chain", "[e2e][lm]") {
  tools::TrainConfig c = synthetic_lm_config();
  c.data.train_limit = 256;
  c.batch = 16;  // 16 steps per epoch
  c.epochs = 6;
  c.report.eval_every = 5;
  c.optim.lr = 1e-2;
  Sink sink;
  const tools::TrainSummary s = tools::train(c, sink.file);
  CHECK(s.steps == 96);
  size_t expected = 6;  // each epoch's end
  for (int64_t step = 1; step <= 96; ++step) expected += step % 5 == 0 && step % 16 != 0;
  CHECK(s.validation_losses.size() == expected);
  CHECK(s.validation_losses.back() < s.validation_losses.front());
  // Uniform guessing scores log(256) = 5.55 nats; the chain's own entropy is 1.21.
  CHECK(s.validation_losses.back() < std::log(256.0) - 2.0);
  CHECK(s.tokens_per_second == Approx(s.samples_per_second * 16));
}

// Catches: the window position, generator or optimizer state lost in a
// language-model checkpoint, and `mixtape eval` scoring a different split.
TEST_CASE("a resumed language-model run continues bit-identically, and eval scores its split",
          "[e2e][lm][checkpoint]") {
  const std::string ckpt = temp_path("resume.safetensors");
  tools::TrainConfig straight = synthetic_lm_config();
  straight.epochs = 2;
  Sink sink;
  const auto full = tools::train(straight, sink.file);
  tools::TrainConfig first = straight;
  first.max_steps = 11;  // mid-epoch: 8 steps per epoch
  first.checkpoint.save = ckpt;
  tools::train(first, sink.file);
  tools::TrainConfig second = straight;
  second.checkpoint.resume = ckpt;
  const auto resumed = tools::train(second, sink.file);
  REQUIRE(resumed.losses.size() == full.losses.size() - 11);
  CHECK(std::vector<double>(full.losses.begin() + 11, full.losses.end()) == resumed.losses);
  CHECK(resumed.validation_loss == full.validation_loss);

  tools::TrainConfig saved = straight;
  saved.checkpoint.save = ckpt;
  saved.data.test_limit = 0;  // the whole held-out split, as `mixtape eval` scores it
  const auto trained = tools::train(saved, sink.file);
  const tools::EvalResult e = tools::evaluate_checkpoint(ckpt, "", "cpu");
  CHECK(e.language_model);
  CHECK(e.dataset == "synthetic-tokens");
  CHECK(e.evaluation.loss == Approx(trained.validation_loss).epsilon(1e-12));
  std::filesystem::remove(ckpt);
}

// Catches: --checkpoint-activations changing what is learned (a different
// dropout or autocast state in the recomputation would change the losses).
TEST_CASE("activation checkpointing in the trainer gives the same losses, bit for bit",
          "[e2e][lm][checkpoint-activations]") {
  for (const char* precision : {"fp32", "bf16"}) {
    INFO(precision);
    tools::TrainConfig c = synthetic_lm_config();
    c.precision.mode = tools::parse_precision(precision);
    c.max_steps = 4;
    Sink sink;
    const auto plain = tools::train(c, sink.file);
    c.memory.checkpoint_activations = true;
    const auto recomputed = tools::train(c, sink.file);
    CHECK(recomputed.losses == plain.losses);
    CHECK(recomputed.validation_loss == plain.validation_loss);
  }
}

// Catches: i64 token batches staged through f32 buffers, or [B, T] targets
// cut to [B], on the CUDA path (eager and captured in a graph).
TEST_CASE("gpt-tiny trains on sim, eagerly and from a CUDA graph, with the same losses", "[e2e][lm][sim][graph]") {
  tools::TrainConfig c = sim_lm_config("gpt-tiny", 3);
  Sink sink;
  const auto eager = tools::train(c, sink.file);
  c.cuda_graph = true;
  const auto graphed = tools::train(c, sink.file);
  REQUIRE(eager.losses.size() == 3);
  CHECK(graphed.losses == eager.losses);
  CHECK(graphed.validation_loss == eager.validation_loss);
  CHECK(std::isfinite(eager.validation_loss));
}

// Catches: a mixture of experts whose step reads the device from the host
// (an arange per step is an upload), and router statistics that a CUDA
// graph's replays do not add to (sums re-pointed each step instead of
// updated in place): the graphed run must count every step's tokens and
// lose the same values as the eager one.
TEST_CASE("llama-moe-tiny on sim: no host sync per step, and a CUDA graph's replays counted",
          "[e2e][moe][sim][graph]") {
  tools::TrainConfig c = sim_lm_config("llama-moe-tiny", 4);
  Sink sink;
  const auto eager = tools::train(c, sink.file);
  CHECK(eager.host_syncs_per_step == 0.0);
  c.cuda_graph = true;
  const auto graphed = tools::train(c, sink.file);
  CHECK(graphed.losses == eager.losses);
  REQUIRE(graphed.router_statistics.size() == 2);
  for (const models::RouterStatistics& r : graphed.router_statistics) CHECK(r.tokens == 4 * 2 * 8);
  CHECK(graphed.router_statistics[1].expert_share == eager.router_statistics[1].expert_share);
}

// Catches: a model trained on data of the other kind (token ids read as
// pixels, or images as tokens), a window longer than the model's positions,
// and --checkpoint-activations silently ignored where it cannot apply.
TEST_CASE("language-model runs refuse mismatched models, datasets and flags", "[lm][errors]") {
  Sink sink;
  tools::TrainConfig c = synthetic_lm_config();
  c.data.dataset = "fashion-mnist";
  CHECK_THROWS_WITH(tools::train(c, sink.file), Contains("gpt-tiny is a language model") && Contains("image"));
  c = synthetic_lm_config();
  c.model = "mlp";
  CHECK_THROWS_WITH(tools::train(c, sink.file), Contains("mlp is an image-classification model"));
  c = synthetic_lm_config();
  c.data.context = 65;
  CHECK_THROWS_WITH(tools::train(c, sink.file), Contains("--context 65") && Contains("context of 64"));
  c = synthetic_lm_config();
  c.model = "mlp";
  c.data.dataset = "synthetic";
  c.memory.checkpoint_activations = true;
  CHECK_THROWS_WITH(tools::train(c, sink.file), Contains("--checkpoint-activations"));
  c = synthetic_lm_config();
  c.report.eval_every = -1;
  CHECK_THROWS_WITH(tools::train(c, sink.file), Contains("--eval-every"));
}

// Catches: passages of a validation document trained on (a leak that
// inflates accuracy), labels that are not the document's genre, passages
// without [CLS] first or with real bytes where the padding should be.
TEST_CASE("brown genre passages: [CLS] + bytes + padding, labelled, split by document", "[data][text][brown]") {
  const data::TextSplits p = data::brown_genre_passages(64);
  REQUIRE(p.train.size() > 10 * p.validation.size() / 2);
  REQUIRE(p.validation.size() > 1000);
  CHECK(p.train.classes == 15);
  CHECK(p.train.inputs.sizes() == Shape{p.train.size(), 64});
  const std::vector<data::BrownDocument> docs = data::load_brown();
  // The first validation passage is the start of ca10 (document index 9), genre a.
  const std::vector<double> first = p.validation.inputs.narrow(0, 0, 1).to_vector();
  CHECK(first[0] == data::kClsToken);
  for (size_t i = 1; i < 64; ++i) CHECK(first[i] == static_cast<unsigned char>(docs[9].text[i - 1]));
  CHECK(p.validation.targets.to_vector()[0] == 0);
  // Every passage: [CLS] first, then bytes, then only padding.
  const std::vector<double> inputs = p.train.inputs.to_vector(), labels = p.train.targets.to_vector();
  std::set<double> genres(labels.begin(), labels.end());
  CHECK(genres.size() == 15);
  for (size_t row = 0; row < labels.size(); row += 97) {
    CHECK(inputs[row * 64] == data::kClsToken);
    bool padding = false;
    for (size_t i = 1; i < 64; ++i) {
      const double t = inputs[row * 64 + i];
      if (padding) CHECK(t == data::kPadToken);
      padding = padding || t == data::kPadToken;
      CHECK(t != data::kClsToken);
    }
  }
  // No validation passage appears in the training set.
  std::set<std::vector<double>> train_rows;
  for (size_t row = 0; row < labels.size(); ++row) {
    train_rows.insert(std::vector<double>(inputs.begin() + row * 64, inputs.begin() + (row + 1) * 64));
  }
  const std::vector<double> held_out = p.validation.inputs.to_vector();
  int64_t leaked = 0;
  for (size_t row = 0; row * 64 < held_out.size(); ++row) {
    leaked += train_rows.count(std::vector<double>(held_out.begin() + row * 64, held_out.begin() + (row + 1) * 64));
  }
  CHECK(leaked < 5);  // a handful of boilerplate lines may repeat across documents, never a document
  CHECK_THROWS_WITH(data::brown_genre_passages(16), Contains("at least 16 bytes"));
}

// Catches: --tokenizer gpt2 ignored (a byte model trained on BPE ids it
// cannot hold), the model's vocabulary not grown to the tokenizer's, the
// checkpoint not recording the tokenizer (generate reading BPE ids as
// bytes), and generate not decoding BPE, for both language-model families.
TEST_CASE("gpt-tiny and llama-tiny train on Brown in GPT-2 BPE tokens and generate reads them back",
          "[e2e][bpe][brown]") {
  for (const std::string model : {"gpt-tiny", "llama-tiny"}) {
    DYNAMIC_SECTION(model) {
      const std::string ckpt = temp_path(model + "_bpe.safetensors");
      tools::TrainConfig c = brown_epoch(model, tools::Precision::Fp32, 16, 32, 8, 8);
      c.data.tokenizer = "gpt2";
      c.checkpoint.save = ckpt;
      Sink sink;
      const tools::TrainSummary s = tools::train(c, sink.file);
      CHECK(s.validation_loss < std::log(50257.0) + 1);  // from the start: about ln(vocabulary)
      const SafetensorsFile f = load_safetensors(ckpt);
      const std::string embedding = model == "gpt-tiny" ? "wte.weight" : "model.embed_tokens.weight";
      CHECK(f.tensors.at(embedding).size(0) == 50257);
      CHECK(tools::checkpoint_config(f, ckpt).data.tokenizer == "gpt2");
      tools::GenerateOptions options;
      options.tokens = 5;
      options.temperature = 0;
      const tools::GenerateResult r = tools::generate_from_checkpoint(ckpt, "The jury said", options, "cpu");
      REQUIRE(r.text.rfind("The jury said", 0) == 0);
      CHECK(r.text.size() > std::string("The jury said").size());  // five BPE tokens: at least five bytes
      std::filesystem::remove(ckpt);
    }
  }
}

// Catches: a mixture of experts whose router statistics are not taken at
// each evaluation (or not reset), activated parameters reported as the
// total, the MoE losses changing the reported loss, and a checkpoint of one
// that generate cannot run (evaluation routes without a capacity).
TEST_CASE("llama-moe-tiny trains on Brown, reports its routers and generates", "[e2e][moe][brown]") {
  const std::string ckpt = temp_path("moe_" + std::to_string(::getpid()) + ".safetensors");
  tools::TrainConfig c = brown_epoch("llama-moe-tiny", tools::Precision::Bf16, 32, 256, 16, 16);
  c.checkpoint.save = ckpt;
  Sink sink;
  const tools::TrainSummary s = tools::train(c, sink.file);
  CHECK(s.activated_parameters < s.parameters);
  CHECK(s.parameters - s.activated_parameters == 2 * (3 * 4 * 64 * 176) / 2);  // 2 of 4 experts idle per layer
  REQUIRE(s.router_statistics.size() == 2);
  for (const models::RouterStatistics& r : s.router_statistics) {
    REQUIRE(r.expert_share.size() == 4);
    CHECK(r.tokens == 16 * 16 * 32);  // the epoch's 16 steps of 16 windows of 32
    double total = 0;
    for (double share : r.expert_share) total += share;
    CHECK(total == Approx(1.0));
    CHECK(r.entropy > 0);
    CHECK(r.entropy <= std::log(4.0) + 1e-6);
    CHECK(r.auxiliary_loss > 0.5);  // E * sum f_e P_e: about 1 near balance
  }
  CHECK(s.losses.front() < std::log(256.0) + 0.5);  // the cross-entropy alone (about ln 256 at the start)
  tools::GenerateOptions options;
  options.tokens = 8;
  options.temperature = 0;
  const tools::GenerateResult r = tools::generate_from_checkpoint(ckpt, "The jury", options, "cpu");
  REQUIRE(r.text.rfind("The jury", 0) == 0);
  CHECK(r.text.size() > std::string("The jury").size());
  std::filesystem::remove(ckpt);
}
