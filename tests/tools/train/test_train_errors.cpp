// The trainer behind `mixtape train` refusing what it must not train on or
// from: a diverging run, missing or hostile datasets, poisoned checkpoints,
// flags that would do nothing, graphs on a device without them.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "amp/grad_scaler.h"
#include "core/safetensors.h"
#include "tests/tools/train/train_test_util.h"
#include "tools/data/loader.h"
#include "tools/train/trainer.h"

using namespace mt;
using namespace mt::test;
using Catch::Contains;

TEST_CASE("a diverging run stops at the first non-finite loss and keeps the last good checkpoint", "[e2e][errors]") {
  const std::string ckpt = temp_path("good.safetensors");
  tools::TrainConfig c = quick_config();
  c.data.train_limit = 512;
  c.checkpoint.save = ckpt;
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::train(c, sink);
  const std::string saved = read_file(ckpt);

  tools::TrainConfig diverge = c;
  diverge.checkpoint.resume = ckpt;
  diverge.epochs = 3;
  diverge.optim.lr = 1e30;  // AdamW moves each weight by about lr per step: logits overflow f32
  diverge.optim.schedule = tools::ScheduleKind::Constant;
  try {
    tools::train(diverge, sink);
    FAIL("training should have stopped");
  } catch (const tools::NonFiniteLoss& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("at step") && Contains("Recent loss scales") && Contains("Last finite losses") &&
                      Contains("last good checkpoint"));
  }
  std::fclose(sink);
  CHECK(read_file(ckpt) == saved);  // untouched
  std::filesystem::remove(ckpt);
}

TEST_CASE("bad input: missing dataset, mismatched checkpoint, non-finite samples, corrupt IDX", "[errors]") {
  tools::TrainConfig c = quick_config();
  c.data.dir = "/nonexistent/fashion";
  REQUIRE_THROWS_WITH(tools::train(c), Contains("Fashion-MNIST not found") && Contains("dataset-fashion-mnist"));

  const std::string ckpt = temp_path("mlp.safetensors");
  tools::TrainConfig save = quick_config();
  save.max_steps = 1;
  save.checkpoint.save = ckpt;
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::train(save, sink);
  tools::TrainConfig wrong = quick_config();
  wrong.model = "cnn";
  wrong.checkpoint.resume = ckpt;
  REQUIRE_THROWS_WITH(tools::train(wrong, sink), Contains("holds a 'mlp' model but --model is 'cnn'"));
  tools::TrainConfig wrong_opt = quick_config();
  wrong_opt.checkpoint.resume = ckpt;
  wrong_opt.optim.optimizer = tools::OptimizerKind::Sgd;
  REQUIRE_THROWS_WITH(tools::train(wrong_opt, sink), Contains("does not match this run"));
  std::fclose(sink);
  std::filesystem::remove(ckpt);

  data::TensorDataset d = data::synthetic_images(8, 2, 4, 4, 1);
  d.inputs.data<float>()[5 * 16 + 3] = NAN;
  data::DataLoader loader(d, {.batch = 8, .shuffle = false, .prefetch = false});
  REQUIRE_THROWS_WITH(loader.next(), Contains("sample 5") && Contains("non-finite"));

  const std::string images = temp_path("images.gz"), labels = temp_path("labels.gz");
  write_gz(images, {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3});  // 2 images of 2x2 need 8 bytes
  write_gz(labels, {0, 0, 8, 1, 0, 0, 0, 2, 1, 3});
  REQUIRE_THROWS_WITH(data::load_idx(images, labels), Contains("truncated"));
  write_gz(images, {0, 0, 8, 1, 0, 0, 0, 2});
  REQUIRE_THROWS_WITH(data::load_idx(images, labels), Contains("not an IDX image file"));
  std::filesystem::remove(images);
  std::filesystem::remove(labels);
}

TEST_CASE("training with --cuda-graph needs a device with graphs", "[graph][errors]") {
  tools::TrainConfig c = quick_config();
  c.device = kCPU;
  c.cuda_graph = true;
  std::FILE* sink = std::fopen("/dev/null", "w");
  CHECK_THROWS_WITH(tools::train(c, sink), Contains("--cuda-graph"));
  std::fclose(sink);
}

// Catches: a resumed run that trusts its checkpoint (issue 14): a loss scale
// of 0/NaN/inf or a negative one (every weight becomes NaN, exit 0), NaN
// weights trained on and written back, negative second moments, positions
// and counters that are negative, past the epoch or read leniently ("12abc"),
// parameters of another dtype converted silently, unknown optimizer keys
// ignored, and a missing per-parameter step restarting Adam's moments.
TEST_CASE("resume refuses poisoned checkpoints with a clear error", "[checkpoint][errors][hardening]") {
  const std::string good = temp_path("poison_source.safetensors"), bad = temp_path("poisoned.safetensors");
  tools::TrainConfig c = quick_config();
  c.precision.mode = tools::Precision::Fp16;
  c.max_steps = 2;
  c.checkpoint.save = good;
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::train(c, sink);
  const SafetensorsFile f = load_safetensors(good);
  auto resume_from = [&](std::map<std::string, Tensor> tensors, std::map<std::string, std::string> metadata) {
    save_safetensors(bad, tensors, metadata);
    tools::TrainConfig r = quick_config();
    r.precision.mode = tools::Precision::Fp16;
    r.max_steps = 3;
    r.checkpoint.resume = bad;
    return tools::train(r, sink);
  };
  auto with_tensor = [&](const std::string& name, const Tensor& value) {
    auto tensors = f.tensors;
    tensors[name] = value;
    return tensors;
  };
  auto with_metadata = [&](const std::string& key, const std::string& value) {
    auto metadata = f.metadata;
    metadata[key] = value;
    return metadata;
  };
  for (const double scale : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    INFO("scale " << scale);
    CHECK_THROWS_WITH(resume_from(with_tensor("scaler.scale", scalar_tensor(scale, kF32)), f.metadata),
                      Contains("scale must be finite and positive") || Contains("'scaler.scale' holds non-finite"));
    // The scaler refuses it on its own too (a state dict that is not from a file).
    amp::GradScaler scaler;
    optim::StateDict state = scaler.state_dict();
    state["scale"] = scalar_tensor(scale, kF32);
    CHECK_THROWS_WITH(scaler.load_state_dict(state), Contains("scale must be finite and positive"));
  }
  Tensor weights = f.tensors.at("fc1.weight").clone();
  weights.data<float>()[7] = NAN;
  CHECK_THROWS_WITH(resume_from(with_tensor("fc1.weight", weights), f.metadata),
                    Contains("'fc1.weight' holds non-finite values"));
  CHECK_THROWS_WITH(resume_from(with_tensor("optimizer.state.0.exp_avg_sq",
                                            full(f.tensors.at("optimizer.state.0.exp_avg_sq").sizes(), -1.0)),
                                f.metadata),
                    Contains("negative second moments"));
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{{"sample_in_epoch", "-3"},
                                                                                   {"sample_in_epoch", "100000"},
                                                                                   {"step", "12abc"},
                                                                                   {"step", "9223372036854775807"},
                                                                                   {"epoch", "-1"},
                                                                                   {"scheduler_step", "-5"},
                                                                                   {"scheduler_step", "999"},
                                                                                   {"rng_offset", "-1"},
                                                                                   {"step", ""}}) {
    INFO(key << " = '" << value << "'");
    CHECK_THROWS_WITH(resume_from(f.tensors, with_metadata(key, value)),
                      Contains("'" + key + "'") && (Contains("outside") || Contains("not a whole number")));
  }
  // A checkpoint from before positions counted samples: its batch index, checked the same way.
  std::map<std::string, std::string> legacy = f.metadata;
  legacy.erase("sample_in_epoch");
  legacy["batch_in_epoch"] = "-3";
  CHECK_THROWS_WITH(resume_from(f.tensors, legacy), Contains("'batch_in_epoch'") && Contains("outside"));
  // A parameter of another dtype (load_state_dict would convert it silently).
  CHECK_THROWS_WITH(resume_from(with_tensor("fc1.weight", f.tensors.at("fc1.weight").to(kF16)), f.metadata),
                    Contains("'fc1.weight' is stored as") && Contains("--precision"));
  // An optimizer key nobody reads, and a moment whose parameter has no step.
  CHECK_THROWS_WITH(resume_from(with_tensor("optimizer.state.0.velocity", full({3}, 1.0)), f.metadata),
                    Contains("unknown key 'state.0.velocity'"));
  auto stepless = f.tensors;
  stepless.erase("optimizer.state.1.step");
  CHECK_THROWS_WITH(resume_from(stepless, f.metadata), Contains("'state.1.exp_avg") && Contains("no 'state.1.step'"));
  // The untouched checkpoint still resumes.
  CHECK(resume_from(f.tensors, f.metadata).steps == 3);
  std::fclose(sink);
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

// Catches: runs that do nothing or nonsense yet exit 0 (issue 14): no
// optimizer step at all, a NaN clip norm, a --save folder that is missing
// found only after the first epoch has trained.
TEST_CASE("train refuses flags that would make the run do nothing or fail late", "[errors][hardening]") {
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::TrainConfig c = quick_config();
  c.data.train_limit = 256;
  c.batch = 128;
  c.optim.grad_accum = 3;  // 2 batches per epoch
  CHECK_THROWS_WITH(tools::train(c, sink), Contains("--grad-accum 3") && Contains("no optimizer step"));
  c = quick_config();
  c.optim.clip = NAN;
  CHECK_THROWS_WITH(tools::train(c, sink), Contains("--clip"));
  c = quick_config();
  c.checkpoint.save = temp_path("no_such_folder/ckpt.safetensors");
  CHECK_THROWS_WITH(tools::train(c, sink), Contains("does not exist") && Contains("before training"));
  std::fclose(sink);
}

// Catches (issue 14): a FIFO or /dev/zero given as a dataset file hanging or
// exhausting memory, a gzip bomb decompressed without bound, and an IDX
// header whose sizes multiply past int64 read as "out of memory".
TEST_CASE("hostile dataset files are refused with a clear error", "[data][errors][hardening]") {
  const std::string fifo = temp_path("fifo.gz"), labels = temp_path("hostile_labels.gz"),
                    images = temp_path("hostile_images.gz");
  write_gz(labels, {0, 0, 8, 1, 0, 0, 0, 1, 3});
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(data::load_idx(fifo, labels), Contains("not a regular file"));
  CHECK_THROWS_WITH(data::load_idx("/dev/zero", labels), Contains("not a regular file"));
  std::filesystem::remove(fifo);
  // 2^32 - 1 images of (2^32 - 1)^2 pixels: the product overflows int64.
  const std::string many_labels = temp_path("hostile_many_labels.gz");
  write_gz(many_labels, {0, 0, 8, 1, 255, 255, 255, 255});
  write_gz(images, {0, 0, 8, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255});
  CHECK_THROWS_WITH(data::load_idx(images, many_labels), Contains("more than 2^63"));
  std::filesystem::remove(many_labels);
  // A bomb: a few MB of gzip that decompress past the 1 GiB bound.
  write_gz(images, {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28}, (size_t{1} << 30) + (1 << 20));
  CHECK(std::filesystem::file_size(images) < (size_t{8} << 20));
  CHECK_THROWS_WITH(data::load_idx(images, labels), Contains("gzip bomb"));
  std::filesystem::remove(images);
  std::filesystem::remove(labels);
}
