// End to end on real data: the trainer behind `mixtape train` (its refusals
// of bad input are in test_train_errors.cpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "amp/grad_scaler.h"
#include "core/checkpoint_file.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "models/mlp.h"
#include "optim/optimizer.h"
#include "tests/tools/train/train_test_util.h"
#include "tools/data/loader.h"
#include "tools/train/trainer.h"

using namespace mt;
using namespace mt::test;
using Catch::Contains;

TEST_CASE("mlp reaches 87% on Fashion-MNIST in fp32, fp16 and bf16, within 0.5 points", "[e2e][slow]") {
  std::map<std::string, double> accuracy;
  for (const char* precision : {"fp32", "fp16", "bf16"}) {
    tools::TrainConfig c;
    c.model = "mlp";
    c.precision.mode = tools::parse_precision(precision);
    c.epochs = 4;
    c.report.progress = false;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const tools::TrainSummary s = tools::train(c, sink);
    std::fclose(sink);
    accuracy[precision] = s.test_accuracy;
    WARN(precision << ": test accuracy " << 100 * s.test_accuracy << "%, " << s.samples_per_second
                   << " samples/s, skipped steps " << s.skipped_steps);
  }
  for (const auto& [p, a] : accuracy) {
    INFO(p);
    CHECK(a >= 0.87);
  }
  CHECK(std::fabs(accuracy["fp16"] - accuracy["fp32"]) <= 0.005);
  CHECK(std::fabs(accuracy["bf16"] - accuracy["fp32"]) <= 0.005);
}

// Catches an FP8 path that trains worse than BF16 (a wrong scale, format or
// transposed operand still learns, but less), with every Linear in FP8.
TEST_CASE("mlp in fp8 stays within 0.5 points of bf16 on Fashion-MNIST, every recipe", "[e2e][slow][fp8]") {
  auto accuracy_of = [](tools::Precision precision, amp::Fp8RecipeKind recipe) {
    tools::TrainConfig c;
    c.model = "mlp";
    c.precision.mode = precision;
    c.precision.fp8.recipe = recipe;
    c.precision.fp8.keep_bf16 = {"none"};
    c.precision.fp8.history = 16;
    c.epochs = 2;
    c.report.progress = false;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const tools::TrainSummary s = tools::train(c, sink);
    std::fclose(sink);
    return s.test_accuracy;
  };
  const double bf16 = accuracy_of(tools::Precision::Bf16, amp::Fp8RecipeKind::Current);
  for (amp::Fp8RecipeKind recipe :
       {amp::Fp8RecipeKind::Current, amp::Fp8RecipeKind::Delayed, amp::Fp8RecipeKind::Block}) {
    const double fp8 = accuracy_of(tools::Precision::Fp8, recipe);
    WARN(amp::fp8_recipe_name(recipe) << ": fp8 " << 100 * fp8 << "%, bf16 " << 100 * bf16 << "%");
    CHECK(std::fabs(fp8 - bf16) <= 0.005);
  }
}

TEST_CASE("a resumed run continues bit-identically, mid-epoch and across precisions", "[e2e][checkpoint]") {
  // fp8: delayed scaling, whose amax histories and scales must come back from the checkpoint.
  for (const char* precision : {"fp32", "fp16", "fp8"}) {
    INFO(precision);
    const std::string ckpt = temp_path(std::string("resume_") + precision + ".safetensors");
    tools::TrainConfig straight = quick_config();
    straight.precision.mode = tools::parse_precision(precision);
    straight.precision.fp8 = {.recipe = amp::Fp8RecipeKind::Delayed, .history = 4, .keep_bf16 = {"none"}};
    straight.epochs = 2;
    straight.optim.clip = 1.0;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const auto full = tools::train(straight, sink);

    tools::TrainConfig first = straight;
    first.max_steps = 21;  // stops mid-epoch (16 steps per epoch)
    first.checkpoint.save = ckpt;
    tools::train(first, sink);
    tools::TrainConfig second = straight;
    second.checkpoint.resume = ckpt;
    const auto resumed = tools::train(second, sink);
    if (std::string(precision) == "fp32") {  // a checkpoint from before positions counted samples
      SafetensorsFile legacy = load_safetensors(ckpt);
      CHECK(legacy.metadata.at("sample_in_epoch") == "640");  // 5 batches of 128 into epoch 2
      legacy.metadata.erase("sample_in_epoch");
      legacy.metadata["batch_in_epoch"] = "5";
      save_safetensors(ckpt, legacy.tensors, legacy.metadata);
      CHECK(tools::train(second, sink).losses == resumed.losses);
    }
    std::fclose(sink);
    REQUIRE(resumed.losses.size() == full.losses.size() - 21);
    CHECK(std::vector<double>(full.losses.begin() + 21, full.losses.end()) == resumed.losses);
    CHECK(resumed.test_accuracy == full.test_accuracy);
    std::filesystem::remove(ckpt);
  }
}

TEST_CASE("checkpoints carry PyTorch's names, the optimizer, the scaler and the config", "[checkpoint]") {
  const std::string ckpt = temp_path("contents.safetensors");
  tools::TrainConfig c = quick_config();
  c.precision.mode = tools::Precision::Fp16;
  c.precision.master_weights = true;
  c.max_steps = 3;
  c.checkpoint.save = ckpt;
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::train(c, sink);
  std::fclose(sink);
  const SafetensorsFile f = load_safetensors(ckpt);
  CHECK(f.tensors.at("fc1.weight").sizes() == Shape{256, 784});
  CHECK(f.tensors.at("fc1.weight").dtype() == kF16);                // the model as it trains: f16
  CHECK(f.tensors.at("optimizer.state.0.master").dtype() == kF32);  // with its f32 master
  CHECK(f.tensors.count("optimizer.state.0.exp_avg") == 1);
  CHECK(f.tensors.at("scaler.scale").item<double>() > 0);
  CHECK(f.metadata.at("model") == "mlp");
  CHECK(f.metadata.at("step") == "3");
  CHECK(f.metadata.at("config").find("\"precision\":\"fp16\"") != std::string::npos);
  const auto r = tools::evaluate_checkpoint(ckpt, "", "cpu");
  CHECK(r.evaluation.accuracy > 0.3);
  CHECK(r.model == "mlp");
  std::filesystem::remove(ckpt);
}

// Catches: the library's checkpoint layout drifting from the CLI's (a
// model key prefixed, the optimizer or scaler under another name): a file
// `mixtape train --save` wrote must load with mt::load_checkpoint.
TEST_CASE("a checkpoint the CLI wrote loads with mt::load_checkpoint", "[checkpoint]") {
  const std::string ckpt = temp_path("library_load.safetensors");
  tools::TrainConfig c = quick_config();
  c.precision.mode = tools::Precision::Fp16;  // so the scaler has a state
  c.max_steps = 2;
  c.checkpoint.save = ckpt;
  std::FILE* sink = std::fopen("/dev/null", "w");
  tools::train(c, sink);
  std::fclose(sink);
  models::Mlp model;
  // The CLI's groups: weight decay on matrices, none on biases.
  std::vector<Tensor> matrices, vectors;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? matrices : vectors).push_back(p);
  optim::AdamW opt({{matrices, std::nullopt, 0.01}, {vectors, std::nullopt, 0.0}});
  amp::GradScaler scaler;
  load_checkpoint(ckpt, {{"model", model}, {"optimizer", opt}, {"scaler", scaler}});
  const SafetensorsFile f = load_safetensors(ckpt);
  CHECK(scaler.get_scale() == f.tensors.at("scaler.scale").item<double>());
  CHECK(model.state_dict().at("fc1.weight").to_vector() == f.tensors.at("fc1.weight").to_vector());
  CHECK(opt.state_dict().at("state.0.exp_avg").to_vector() == f.tensors.at("optimizer.state.0.exp_avg").to_vector());
  std::filesystem::remove(ckpt);
}

TEST_CASE("shuffling is seeded per epoch and augmentation is reproducible", "[data]") {
  const data::TensorDataset d = data::synthetic_images(64, 4, 6, 6, 3);
  data::DataLoader a(d, {.batch = 16, .augment = true, .seed = 5});
  data::DataLoader b(d, {.batch = 16, .augment = true, .seed = 5});
  const auto first = a.next()->targets.to_vector();
  CHECK(first == b.next()->targets.to_vector());
  a.start_epoch(1);
  CHECK(a.next()->targets.to_vector() != first);
  a.start_epoch(0, /*skip_batches=*/1);
  b.start_epoch(0);
  b.next();
  CHECK(a.next()->inputs.to_vector() == b.next()->inputs.to_vector());
  CHECK(a.batches_per_epoch() == 4);
}

// The bugs: ranks that read overlapping samples (or miss some), shards of
// different lengths (the ranks' step counts then differ and the job hangs),
// or a union per step that is not one process's batch of shard_count x B.
TEST_CASE("sharded loaders split each epoch into disjoint, equal rank shards", "[data][dist]") {
  data::TensorDataset d;
  std::vector<int64_t> index(10);
  for (int64_t i = 0; i < 10; ++i) index[static_cast<size_t>(i)] = i;
  d.inputs = from_vector(index, {10, 1}).to(kF32);
  d.targets = from_vector(index, {10});
  d.classes = 10;
  data::DataLoader whole(d, {.batch = 6, .seed = 3, .prefetch = false});
  const std::vector<double> first_batch = whole.next()->targets.to_vector();
  for (bool drop : {false, true}) {
    std::vector<double> seen;
    std::vector<double> first_batches;
    for (int64_t rank = 0; rank < 3; ++rank) {
      data::DataLoader mine(
          d, {.batch = 2, .seed = 3, .prefetch = false, .shard_rank = rank, .shard_count = 3, .drop_uneven = drop});
      CHECK(mine.samples_per_epoch() == (drop ? 3 : 4));
      CHECK(mine.batches_per_epoch() == 2);
      bool first = true;
      while (auto b = mine.next()) {
        const std::vector<double> targets = b->targets.to_vector();
        seen.insert(seen.end(), targets.begin(), targets.end());
        if (first) first_batches.insert(first_batches.end(), targets.begin(), targets.end());
        first = false;
      }
    }
    std::sort(seen.begin(), seen.end());
    std::sort(first_batches.begin(), first_batches.end());
    std::vector<double> expected_first = first_batch;
    std::sort(expected_first.begin(), expected_first.end());
    CHECK(first_batches == expected_first);  // the ranks' batch 0 is one process's batch 0 of 3 x 2
    if (drop) {
      CHECK(seen.size() == 9);
      CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // nothing twice
    } else {
      CHECK(seen.size() == 12);  // 10 samples, 2 repeated to pad the last shard
      CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() == 10);
    }
  }
  CHECK_THROWS_WITH(data::DataLoader(d, {.shard_rank = 3, .shard_count = 3}), Contains("does not exist"));
}

// Catches a kernel whose result depends on the thread count (the tuner
// changes it mid-run, so runs of one seed would differ) and a tuner that
// leaves its count behind after train() returns.
TEST_CASE("training gives the same losses on 1 thread, 2 threads and under the thread tuner", "[e2e][threads]") {
  std::FILE* sink = std::fopen("/dev/null", "w");
  for (const char* model : {"mlp", "cnn"}) {
    for (const char* precision : {"fp32", "bf16"}) {
      INFO(model << " " << precision);
      tools::TrainConfig c = quick_config();
      c.model = model;
      c.precision.mode = tools::parse_precision(precision);
      c.data.train_limit = std::string(model) == "cnn" ? 256 : 2048;
      c.batch = std::string(model) == "cnn" ? 32 : 128;
      c.data.test_limit = 100;
      c.parallel.threads = 1;
      const int before = num_threads();
      const auto one = tools::train(c, sink);
      CHECK(one.threads == 1);
      c.parallel.threads = 2;
      const auto two = tools::train(c, sink);
      CHECK(two.threads == 2);
      c.parallel.threads = 0;
      const auto tuned = tools::train(c, sink);
      CHECK(num_threads() == before);
      CHECK(one.losses == two.losses);
      CHECK(one.losses == tuned.losses);
      CHECK(one.test_accuracy == tuned.test_accuracy);
    }
  }
  tools::TrainConfig c = quick_config();
  c.parallel.threads = -1;
  CHECK_THROWS_WITH(tools::train(c, sink), Contains("--threads"));
  std::fclose(sink);
}

// The bugs: ZeRO-1's flat layout losing or doubling a slice of a parameter,
// its shard optimizer stepping views that do not alias the parameters, or a
// consolidated checkpoint that resumes elsewhere. In a world of one the
// sharded optimizer holds every element, so the run must match the plain one
// bit for bit, including a resume from its checkpoint without sharding.
TEST_CASE("ZeRO-1 (train --shard-optimizer) in a world of one trains and checkpoints exactly as without it",
          "[e2e][dist][zero]") {
  std::FILE* sink = std::fopen("/dev/null", "w");
  for (const char* precision : {"fp32", "fp16"}) {
    INFO(precision);
    tools::TrainConfig c = quick_config();
    c.precision.mode = tools::parse_precision(precision);
    c.max_steps = 6;
    c.epochs = 2;
    c.parallel.threads = 1;
    c.precision.master_weights = std::string(precision) == "fp16";
    c.optim.clip =
        c.precision.master_weights ? 0.0 : 0.5;  // the global norm over the shards (unscale_ refuses f16 gradients)
    const auto plain = tools::train(c, sink);
    c.parallel.shard_optimizer = true;
    const std::string ckpt = temp_path("zero.safetensors");
    c.checkpoint.save = ckpt;
    const auto sharded = tools::train(c, sink);
    CHECK(plain.losses == sharded.losses);
    CHECK(plain.memory_ledger.at_peak[static_cast<size_t>(MemoryCategory::OptimizerState)] ==
          sharded.memory_ledger.at_peak[static_cast<size_t>(MemoryCategory::OptimizerState)]);
    // Its checkpoint is an unsharded optimizer's: it resumes without --shard-optimizer.
    tools::TrainConfig resumed = c;
    resumed.parallel.shard_optimizer = false;
    resumed.checkpoint.save.clear();
    resumed.checkpoint.resume = ckpt;
    resumed.max_steps = 8;
    const auto after = tools::train(resumed, sink);
    CHECK(after.steps == 8);
    tools::TrainConfig straight = c;
    straight.parallel.shard_optimizer = false;
    straight.checkpoint.save.clear();
    straight.max_steps = 8;
    const auto reference = tools::train(straight, sink);
    REQUIRE(reference.losses.size() == 8);
    CHECK(after.losses == std::vector<double>(reference.losses.begin() + 6, reference.losses.end()));
    std::filesystem::remove(ckpt);
  }
  std::fclose(sink);
}

TEST_CASE("a few training steps on the sim device match the CPU run's losses", "[e2e][sim]") {
  // The same run through the CUDA kernels (on the simulator) and the CPU
  // kernels: losses agree within the precision's tolerance.
  struct Case {
    const char* model;
    const char* precision;
    double tolerance;
  };
  for (const Case& k : {Case{"mlp", "fp32", 1e-4}, Case{"mlp", "fp16", 2e-2}, Case{"mlp", "bf16", 5e-2},
                        Case{"cnn", "fp32", 1e-4}, Case{"cnn", "fp16", 2e-2}}) {
    INFO(k.model << " " << k.precision);
    tools::TrainConfig c = quick_config();
    c.model = k.model;
    c.precision.mode = tools::parse_precision(k.precision);
    const bool small = std::string(k.model) == "cnn";  // convolutions are slow on the simulator
    c.batch = small ? 8 : 32;
    c.max_steps = small ? 2 : 3;
    c.data.train_limit = 256;
    c.data.test_limit = small ? 16 : 64;
    std::FILE* sink = std::fopen("/dev/null", "w");
    c.device = kCPU;
    const auto cpu = tools::train(c, sink);
    c.device = kSIM;
    const auto sim = tools::train(c, sink);
    std::fclose(sink);
    REQUIRE(sim.losses.size() == cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i) CHECK(sim.losses[i] == Approx(cpu.losses[i]).epsilon(k.tolerance));
  }
}

// Catches: any host sync left in the training step (an item() per
// micro-batch, the skip flag read for the scheduler, the scale read for the
// progress line, targets counted on the host, a blocking batch upload, a
// host-built constant copied over, --explain-skips' per-parameter flags or
// --report's gradient norm read back eagerly). The sim device runs the CUDA
// code path, so a sync there is a sync on a GPU.
TEST_CASE("training steps on the sim device never make the host wait", "[e2e][sim][host_sync]") {
  struct Case {
    const char* precision;
    double clip;
    int64_t grad_accum;
    const char* optimizer;
    bool diagnostics = false;  // --explain-skips 1 and the measured gradient norm (--report)
    const char* fp8_recipe = "current";
  };
  for (const Case& k :
       {Case{"fp32", 0, 1, "adamw"}, Case{"fp16", 1.0, 1, "adamw"}, Case{"bf16", 0, 1, "sgd"},
        Case{"fp16", 0.5, 2, "adamw"}, Case{"fp16", 0, 1, "adamw", true}, Case{"fp8", 0, 2, "adamw", false, "current"},
        Case{"fp8", 1.0, 1, "adamw", false, "delayed"}, Case{"fp8", 0, 1, "adamw", false, "block"}}) {
    INFO(k.precision << " clip " << k.clip << " grad_accum " << k.grad_accum << " " << k.optimizer << " diagnostics "
                     << k.diagnostics << " fp8 " << k.fp8_recipe);
    tools::TrainConfig c = quick_config();
    c.device = kSIM;
    c.precision.mode = tools::parse_precision(k.precision);
    c.precision.fp8.recipe = amp::parse_fp8_recipe(k.fp8_recipe);
    c.precision.fp8.keep_bf16 = {"none"};
    c.optim.clip = k.clip;
    c.optim.grad_accum = k.grad_accum;
    c.optim.optimizer = tools::parse_optimizer(k.optimizer);
    c.debug.explain_skips = k.diagnostics ? 1 : 0;
    c.report.record_grad_norm = k.diagnostics;
    c.batch = 16;
    c.max_steps = 5;
    c.data.train_limit = 256;
    c.data.test_limit = 32;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const auto summary = tools::train(c, sink);
    std::fclose(sink);
    CHECK(summary.steps == 5);
    CHECK(summary.losses.size() == 5);
    CHECK(summary.host_syncs_per_step == 0.0);
  }
}

// Catches: a step that cannot be captured (a host sync inside it fails the
// capture), state that is not updated in place (the loss scale, the step
// counters, BN's running statistics: replays would keep using the values
// seen at capture, and the losses drift from the eager run's), scalars baked
// into the graph that should change per step (the lr), a replay that reads
// inputs from the address of the captured step's batch instead of the static
// buffer, and an epoch's short last batch replayed through full-batch
// buffers. The sim device is deterministic, so the losses must be identical.
TEST_CASE("training with --cuda-graph on the sim device gives the eager run's losses, without host syncs",
          "[e2e][sim][graph]") {
  struct Case {
    const char* model;
    const char* precision;
    double clip;
    int64_t grad_accum;
    const char* optimizer;
    int64_t train_limit, batch, epochs;
    const char* fp8_recipe = "current";
    const char* optimizer_state = "f32";
  };
  // fp8 delayed: the amax histories and scales must update in place inside the graph. BF16 and
  // 8-bit optimizer state: their rounding bits and absmaxes too.
  for (const Case& k : {Case{"mlp", "fp16", 1.0, 2, "adamw", 200, 16, 2},
                        Case{"mlp", "bf16", 0, 1, "sgd", 72, 16, 2, "current", "bf16"},
                        Case{"cnn", "fp16", 0, 1, "adamw", 32, 8, 1, "current", "int8"},
                        Case{"mlp", "fp8", 0, 1, "adamw", 72, 16, 2, "delayed"}}) {
    INFO(k.model << " " << k.precision << " clip " << k.clip << " grad_accum " << k.grad_accum << " " << k.optimizer
                 << " state " << k.optimizer_state);
    tools::TrainConfig c = quick_config();
    c.device = kSIM;
    c.optim.state = optim::parse_state_dtype(k.optimizer_state);
    c.model = k.model;
    c.precision.mode = tools::parse_precision(k.precision);
    c.precision.fp8.recipe = amp::parse_fp8_recipe(k.fp8_recipe);
    c.precision.fp8.keep_bf16 = {"none"};
    c.optim.clip = k.clip;
    c.optim.grad_accum = k.grad_accum;
    c.optim.optimizer = tools::parse_optimizer(k.optimizer);
    c.batch = k.batch;
    c.epochs = k.epochs;
    c.data.train_limit = k.train_limit;
    c.data.test_limit = 16;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const auto eager = tools::train(c, sink);
    c.cuda_graph = true;
    const auto graphed = tools::train(c, sink);
    std::fclose(sink);
    REQUIRE(graphed.losses.size() == eager.losses.size());
    CHECK(eager.losses.size() >= 4);
    for (size_t i = 0; i < eager.losses.size(); ++i) CHECK(graphed.losses[i] == eager.losses[i]);
    CHECK(graphed.epoch_accuracies == eager.epoch_accuracies);
    CHECK(graphed.host_syncs_per_step == 0.0);
  }
}
