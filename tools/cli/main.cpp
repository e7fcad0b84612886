// The `mixtape` command line: train, eval, generate, bench, compare, report, check-data, info.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <charconv>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>

#include "autograd/anomaly.h"
#include "distributed/process_group.h"
#include "runtime/launch_check.h"
#include "mixtape.h"
#include "models/registry.h"
#include "tools/train/bench.h"
#include "tools/train/compare.h"
#include "tools/data/check.h"
#include "tools/data/dataset.h"
#include "tools/train/generate.h"
#include "tools/train/machine.h"
#include "tools/train/report.h"
#include "tools/train/trainer.h"
#if defined(MT_WITH_CUDA)
#include "core/device_info.h"
#endif

namespace {

constexpr int kExitError = 1;
constexpr int kExitNonFiniteLoss = 3;

// With MT_PROFILE=1: the CUDA-path kernels and library calls of the run,
// slowest total first (runtime/launch_check.h).
void print_profile() {
  if (mt::kernels::profiling())
    std::fprintf(stderr, "\nkernel profile (MT_PROFILE)\n%s", mt::kernels::profile_report().c_str());
}

int run_info(const std::string& data_dir) {
  std::printf("mixtape 0.1.0 (g++ %d.%d, C++%ld, Eigen %d.%d.%d)\n", __GNUC__, __GNUC_MINOR__, __cplusplus / 100 % 100,
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  std::printf("cpu: %ld cores, %.1f GiB memory\n", sysconf(_SC_NPROCESSORS_ONLN),
              static_cast<double>(pages) * static_cast<double>(page) / (1 << 30));
#if defined(MT_WITH_CUDA)
  const auto devices = mt::cuda::query_devices();
  if (devices.count == 0) {
    std::printf("cuda: built (runtime %d), %s\n", devices.runtime_version,
                devices.error.empty() ? "no devices" : devices.error.c_str());
  } else {
    for (const auto& name : devices.names) std::printf("cuda: %s\n", name.c_str());
  }
#else
  std::printf("cuda: not built\n");
#endif
  try {
    mt::allocator_for(mt::kSIM);
    std::printf("sim: available (CUDA kernels on the SIMT simulator)\n");
  } catch (const mt::Error&) {
    std::printf("sim: not available in this build\n");
  }
  const std::string dir = mt::data::fashion_mnist_directory(data_dir);
  const bool found = std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz");
  std::printf("fashion-mnist: %s (%s)\n", found ? "found" : "missing: apt-get install dataset-fashion-mnist",
              dir.c_str());
  std::printf("models:\n");
  for (const auto& m : mt::models::model_list()) std::printf("  %-10s %s\n", m.name.c_str(), m.description.c_str());
  return 0;
}

// A seed option read as a whole decimal number that fits 64 bits: CLI11
// would wrap "-1" and an overflowing value without a word.
CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, const std::string& help) {
  return cmd->add_option_function<std::string>(
      "--seed",
      [&seed](const std::string& text) {
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
        if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
          throw CLI::ValidationError("--seed", "'" + text + "' is not a whole number from 0 to 2^64 - 1");
        }
      },
      help);
}

// The mixed-precision debugging aids, shared by train and compare.
void add_diagnostic_options(CLI::App* cmd, mt::tools::TrainConfig& c) {
  cmd->add_flag("--detect-anomaly", c.detect_anomaly,
                "stop at the first NaN/inf an op produces in forward or backward and name the op, its module, dtype "
                "and input ranges (slow: reads every result back)");
  cmd->add_flag("--dtype-report", c.dtype_report,
                "list the dtype autocast chose per module and op (first step) and flag activations left in f32");
  cmd->add_option("--explain-skips", c.explain_skips,
                  "when the GradScaler skips a step, name the parameters whose gradients held inf/NaN: at the first "
                  "skip and every Nth after it (N = the value, e.g. 1 for every skip; 0 = off)")
      ->check(CLI::NonNegativeNumber);
}

// The command line as a shell would take it back (for logs and reports).
std::string quoted_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    std::string arg = i == 0 ? std::string("mixtape") : std::string(argv[i]);
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") ==
            std::string::npos;
    if (!plain) {
      std::string q = "'";
      for (const char ch : arg) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      arg = q + "'";
    }
    line += (i == 0 ? "" : " ") + arg;
  }
  return line;
}

// `mixtape check-data`: per split, what would make training go wrong; exit 1 when anything is found.
int run_check_data(mt::tools::TrainConfig c) {
  if (c.model == "auto" && c.dataset != "auto") {
    if (c.dataset == "brown" || c.dataset == "synthetic-tokens") c.model = "gpt-tiny";
    if (c.dataset == "brown-genre") c.model = "bert-tiny";
  }
  const auto [train, test] = mt::tools::load_training_data(c);
  bool clean = true;
  for (const auto& [name, split] : {std::pair{"train", &train}, std::pair{"held-out", &test}}) {
    // Padding positions of a text dataset carry the cross-entropy's ignore_index.
    const mt::data::DataCheck check = mt::data::check_dataset(*split);
    std::printf("%s: %s\n", name, mt::data::describe(check, split->classes).c_str());
    clean = clean && check.clean();
  }
  std::printf("%s\n", clean ? "check-data: nothing wrong found" : "check-data: problems found (see above)");
  return clean ? 0 : kExitError;
}

void add_train_options(CLI::App* cmd, mt::tools::TrainConfig& c) {
  std::vector<std::string> names;
  for (const auto& m : mt::models::model_list()) names.push_back(m.name);
  names.push_back("auto");
  cmd->add_option(
         "--model", c.model,
         "auto (mlp on a CPU, cnn on a GPU) | mlp | cnn | resnet | gpt-tiny | gpt-small | gpt2-124m | bert-tiny "
         "| bert-mini | bert-base")
      ->check(CLI::IsMember(names));
  cmd->add_option("--precision", c.precision,
                  "auto (bf16 on a CPU, fp16 on a GPU) | fp32 | fp16 (autocast + GradScaler) | bf16 (autocast)")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16"}));
  cmd->add_flag("--master-weights", c.master_weights, "f16/bf16 parameters with f32 master weights in the optimizer");
  cmd->add_option("--device", c.device, "auto | cpu | cuda | sim");
  cmd->add_option("--epochs", c.epochs, "epochs")->check(CLI::PositiveNumber);
  cmd->add_option("--steps", c.max_steps, "stop after N optimizer steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch", c.batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--lr", c.lr, "peak learning rate")->check(CLI::PositiveNumber);
  cmd->add_option("--optimizer", c.optimizer, "adamw | sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--weight-decay", c.weight_decay, "weight decay (not on biases and norms)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--schedule", c.schedule, "cosine | constant | step")
      ->check(CLI::IsMember({"cosine", "constant", "step"}));
  cmd->add_option("--warmup", c.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  cmd->add_flag("--cuda-graph", c.cuda_graph,
                "capture the whole training step in a CUDA graph once and replay it (cuda or sim device)");
  cmd->add_option("--clip", c.clip, "max gradient norm (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--init-scale", c.init_scale, "fp16: the GradScaler's first loss scale (default 65536)")
      ->check(CLI::PositiveNumber);
  add_seed_option(cmd, c.seed, "random seed (0 to 2^64 - 1)");
  cmd->add_option("--save", c.save, "checkpoint (.safetensors) written each epoch and at the end");
  cmd->add_option("--resume", c.resume, "continue from a checkpoint")->check(CLI::ExistingFile);
  cmd->add_option("--log", c.log, "metrics as JSON lines");
  cmd->add_option("--report", c.report,
                  "write this run's HTML report here at the end (loss, loss scale, gradient norm, throughput, memory "
                  "ledger; one self-contained file)");
  cmd->add_option("--tensorboard", c.tensorboard,
                  "write TensorBoard event files into this folder (loss, lr, loss scale, gradient norm, samples/s, "
                  "memory by category)");
  cmd->add_option("--data", c.data,
                  "the dataset's directory (default: $MT_FASHION_MNIST or the Debian package's for Fashion-MNIST, "
                  "$MT_BROWN_DIR or the cache folder tools/scripts/setup.sh fills for Brown)");
  cmd->add_option("--dataset", c.dataset,
                  "auto (the model's kind) | fashion-mnist | synthetic (images) | brown (bytes of the Brown corpus) "
                  "| synthetic-tokens | brown-genre (passages labelled by genre)")
      ->check(CLI::IsMember({"auto", "fashion-mnist", "synthetic", "brown", "synthetic-tokens", "brown-genre"}));
  cmd->add_option("--context", c.context, "text models: tokens per window or passage (default: the model's context)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-every", c.eval_every, "also evaluate every N optimizer steps (default: each epoch's end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag(
      "--checkpoint-activations", c.checkpoint_activations,
      "recompute each block (transformers) or stage (cnn, resnet) in backward instead of keeping its activations");
  cmd->add_flag("--offload-optimizer", c.offload_optimizer,
                "keep master weights and optimizer state in host memory, streamed to the device for each update");
  cmd->add_flag("--augment", c.augment, "random crop and horizontal flip");
  cmd->add_option("--train-limit", c.train_limit, "use only the first N training samples (images or text windows)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--test-limit", c.test_limit, "use only the first N held-out samples")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", c.threads,
                  "CPU threads for the kernels (default 0 = auto: timed trials of 1, 2, 4, ... threads up to "
                  "$MT_NUM_THREADS or the cores keep the fastest, and are repeated every few seconds)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  cmd->add_flag("--memory", c.memory,
                "print the memory ledger at the training peak (parameters, gradients, optimizer state, activations, "
                "...) beside its theory");
  cmd->add_flag("--shard-optimizer", c.shard_optimizer,
                "ZeRO stage 1 (with mpirun -np N): each rank keeps 1/N of the optimizer state and master weights");
  cmd->add_flag("--ddp", c.ddp,
                "train through DistributedDataParallel even as one process (mpirun -np N > 1 always does); with "
                "MT_DIST_BACKEND=nccl it runs the NCCL path on one GPU");
  cmd->add_flag("--drop-uneven", c.drop_uneven,
                "with mpirun -np N: leave out the last training samples of each epoch that do not split evenly "
                "over the ranks (default: pad the last shards by repeating samples from the epoch's start, as "
                "PyTorch's DistributedSampler)");
  cmd->add_flag("!--no-progress", c.progress, "no live progress line");
  add_diagnostic_options(cmd, c);
}

// Runs a command; its errors become a message on stderr and an exit code.
template <typename Command>
int with_error_exit_codes(Command&& command) {
  const std::string rank = mt::dist::is_distributed()
                               ? fmt::format(" (rank {} of {})", mt::dist::world().rank(), mt::dist::world().size())
                               : std::string();
  try {
    return command();
  } catch (const mt::AnomalyError& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank.c_str(), e.what());
    return kExitNonFiniteLoss;
  } catch (const mt::tools::NonFiniteLoss& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank.c_str(), e.what());
    return kExitNonFiniteLoss;
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "\nerror%s: %s\n", rank.c_str(), e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "\nerror%s: out of memory (an input asked for more than this machine has)\n", rank.c_str());
    return kExitError;
  } catch (const std::exception& e) {  // nlohmann, filesystem, ...: a bug to report, but never a crash
    std::fprintf(stderr, "\nerror%s: %s\n", rank.c_str(), e.what());
    return kExitError;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mixtape: native mixed-precision training in C++/CUDA"};
  app.require_subcommand(1);

  mt::tools::TrainConfig config;
  auto* train = app.add_subcommand("train", "Train a reference model (Fashion-MNIST images or Brown text)");
  add_train_options(train, config);

  std::string checkpoint, eval_device = "auto", data_dir;
  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the held-out split of the data it trained on");
  eval->add_option("--checkpoint", checkpoint, "checkpoint (.safetensors)")->required()->check(CLI::ExistingFile);
  eval->add_option("--device", eval_device, "auto | cpu | cuda | sim");
  eval->add_option("--data", data_dir, "the dataset's directory");
  int64_t eval_limit = 0;
  eval->add_option("--test-limit", eval_limit, "only the first N held-out samples")->check(CLI::NonNegativeNumber);
  bool eval_half = false;
  eval->add_flag("--half", eval_half,
                 "also evaluate the model converted to f16 (GPU, sim) or bf16 (CPU) weights, norms kept in f32, "
                 "beside the f32 weights under the same autocast");

  std::string prompt, generate_device = "auto";
  mt::tools::GenerateOptions generation;
  bool no_cache = false;
  auto* generate =
      app.add_subcommand("generate", "Continue a prompt with a trained language model (bytes in, bytes out)");
  generate->add_option("--checkpoint", checkpoint, "checkpoint (.safetensors) of gpt-tiny, gpt-small, ...")
      ->required()
      ->check(CLI::ExistingFile);
  generate->add_option("--prompt", prompt, "the text to continue")->required();
  generate->add_option("--tokens", generation.tokens, "new tokens (bytes) to generate")->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", generation.temperature, "sampling temperature (0 = greedy)")
      ->check(CLI::NonNegativeNumber);
  generate->add_option("--top-k", generation.top_k, "sample among the k most likely tokens only (0 = all)")
      ->check(CLI::NonNegativeNumber);
  add_seed_option(generate, generation.seed, "sampling seed (0 to 2^64 - 1)");
  generate->add_option("--device", generate_device, "auto | cpu | cuda | sim");
  generate->add_flag("--no-cache", no_cache, "re-run the whole window for every token (no key/value cache)");

  mt::tools::BenchOptions bench_options;
  std::string bench_budget, bench_json;
  auto* bench = app.add_subcommand(
      "bench", "FP32 vs AMP FP16/BF16 vs AMP at the largest batch that fits: peak memory, iterations/s, samples/s");
  {
    std::vector<std::string> names;
    for (const auto& m : mt::models::model_list()) names.push_back(m.name);
    bench->add_option("--model", bench_options.model, "the model to measure (default mlp)")
        ->check(CLI::IsMember(names));
  }
  bench->add_option("--device", bench_options.device, "auto | cpu | cuda | sim");
  bench->add_option("--steps", bench_options.steps, "timed steps per configuration (default 50)")
      ->check(CLI::PositiveNumber);
  bench->add_option("--warmup", bench_options.warmup, "untimed steps first (default 5)")->check(CLI::PositiveNumber);
  bench->add_option("--batch", bench_options.batch, "batch size B of the first three rows (default 128)")
      ->check(CLI::PositiveNumber);
  bench->add_option("--mem-budget", bench_budget,
                    "memory the last row's batch must fit in, e.g. 8GiB or 300MiB (default: the FP32 row's peak)");
  bench->add_option("--json", bench_json, "also write the table, the machine and the commit as JSON");
  bench->add_option("--data", bench_options.data, "the dataset's directory (as train --data)");
  bench->add_option("--dataset", bench_options.dataset, "as train --dataset (default: the model's)")
      ->check(CLI::IsMember({"auto", "fashion-mnist", "synthetic", "brown", "synthetic-tokens", "brown-genre"}));
  bench->add_option("--train-limit", bench_options.train_limit, "use only the first N training samples")
      ->check(CLI::NonNegativeNumber);
  bench->add_flag("!--no-progress", bench_options.progress, "no live progress line");
  bool bench_ladder = false;
  bench->add_flag("--ladder", bench_ladder,
                  "the low-memory ladder at effective batch B: AMP, + gradient accumulation, + activation "
                  "checkpointing (transformers)");
  bench->add_option("--accum", bench_options.accum, "--ladder: micro-batches per step (default 4)")
      ->check(CLI::PositiveNumber);

  mt::tools::CompareOptions compare_options;
  mt::tools::TrainConfig& cc = compare_options.base;
  cc.max_steps = 100;
  cc.epochs = 1000;          // --steps ends the runs
  cc.schedule = "constant";  // a schedule spans --epochs, which --steps cuts short
  auto* compare = app.add_subcommand(
      "compare", "Train FP32, AMP FP16 (GradScaler) and AMP BF16 from the same seed and draw them on one HTML page");
  {
    std::vector<std::string> names;
    for (const auto& m : mt::models::model_list()) names.push_back(m.name);
    names.push_back("auto");
    compare->add_option("--model", cc.model, "the model (default: mlp on a CPU, cnn on a GPU)")
        ->check(CLI::IsMember(names));
  }
  compare->add_option("--out", compare_options.out, "the HTML report to write")->required();
  compare->add_option("--steps", cc.max_steps, "optimizer steps per run (default 100)")->check(CLI::PositiveNumber);
  compare->add_option("--precisions", compare_options.precisions, "the runs, in order (default fp32 fp16 bf16)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  compare->add_option("--device", cc.device, "auto | cpu | cuda | sim");
  compare->add_option("--batch", cc.batch, "batch size")->check(CLI::PositiveNumber);
  compare->add_option("--lr", cc.lr, "peak learning rate")->check(CLI::PositiveNumber);
  compare->add_option("--epochs", cc.epochs, "epochs the schedule spans (the runs stop at --steps)")
      ->check(CLI::PositiveNumber);
  compare->add_option("--warmup", cc.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  compare->add_option("--schedule", cc.schedule, "constant (default) | cosine | step, over --epochs")
      ->check(CLI::IsMember({"cosine", "constant", "step"}));
  add_seed_option(compare, cc.seed, "random seed, the same for every run");
  compare->add_option("--data", cc.data, "the dataset's directory (as train --data)");
  compare->add_option("--dataset", cc.dataset, "as train --dataset")
      ->check(CLI::IsMember({"auto", "fashion-mnist", "synthetic", "brown", "synthetic-tokens", "brown-genre"}));
  compare->add_option("--context", cc.context, "text models: tokens per window")->check(CLI::NonNegativeNumber);
  compare->add_option("--train-limit", cc.train_limit, "use only the first N training samples")
      ->check(CLI::NonNegativeNumber);
  compare->add_option("--test-limit", cc.test_limit, "use only the first N held-out samples")
      ->check(CLI::NonNegativeNumber);
  compare->add_option("--threads", cc.threads, "CPU threads (default 0 = timed)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  compare->add_option("--log-dir", compare_options.log_dir, "also keep each run's metrics log here");
  compare->add_flag("!--no-progress", cc.progress, "no live progress line");
  add_diagnostic_options(compare, cc);

  std::vector<std::string> report_logs;
  std::string report_out;
  auto* report = app.add_subcommand("report", "Draw the HTML report of metrics logs written by train --log");
  report->add_option("logs", report_logs, "metrics logs (JSON lines of train --log); several are drawn together")
      ->required();
  report->add_option("--out", report_out, "the HTML report to write")->required();

  mt::tools::TrainConfig check_config;
  auto* check_data = app.add_subcommand(
      "check-data", "Scan a dataset for NaN/inf inputs, out-of-range labels and empty samples before training");
  check_data->add_option("--data", check_config.data, "the dataset's directory (as train --data)");
  check_data->add_option("--dataset", check_config.dataset, "as train --dataset (default fashion-mnist)")
      ->check(CLI::IsMember({"auto", "fashion-mnist", "synthetic", "brown", "synthetic-tokens", "brown-genre"}));
  check_data->add_option("--context", check_config.context, "text datasets: tokens per window or passage")
      ->check(CLI::NonNegativeNumber);

  auto* info = app.add_subcommand("info", "Devices, memory, versions, datasets and models");
  info->add_option("--data", data_dir, "Fashion-MNIST directory");

  CLI11_PARSE(app, argc, argv);
  config.command = quoted_command_line(argc, argv);
  compare_options.command = config.command;
  // `mpirun -np N mixtape train ...`: every rank runs this; a failure on one
  // ends them all (the others would wait for it in their next collective).
  if (*train) mt::dist::init_process_group();
  const int code = with_error_exit_codes([&]() -> int {
    if (*info) return run_info(data_dir);
    if (*eval) {
      const auto r = mt::tools::evaluate_checkpoint(checkpoint, data_dir, eval_device, eval_limit, eval_half);
      if (r.language_model) {
        std::printf("%s (%s, step %lld): validation loss %.4f nats/token (perplexity %.2f) on %s\n", r.model.c_str(),
                    r.precision.c_str(), static_cast<long long>(r.step), r.evaluation.loss, r.evaluation.perplexity(),
                    r.dataset.c_str());
      } else {
        std::printf("%s (%s, step %lld): test accuracy %.2f%%\n", r.model.c_str(), r.precision.c_str(),
                    static_cast<long long>(r.step), 100.0 * r.evaluation.accuracy);
      }
      if (r.half) {
        auto score = [&](const mt::tools::Evaluation& e) {
          return r.language_model ? fmt::format("validation loss {:.4f}", e.loss)
                                  : fmt::format("test accuracy {:.2f}%", 100.0 * e.accuracy);
        };
        std::printf(
            "%s weights (norms in f32): %s; f32 weights under the same autocast: %s; parameters %.2f MiB -> "
            "%.2f MiB\n",
            r.half_dtype.c_str(), score(r.half_evaluation).c_str(), score(r.autocast_evaluation).c_str(),
            static_cast<double>(r.parameter_bytes) / (1 << 20),
            static_cast<double>(r.half_parameter_bytes) / (1 << 20));
      }
      print_profile();
      return 0;
    }
    if (*generate) {
      generation.use_cache = !no_cache;
      const auto r = mt::tools::generate_from_checkpoint(checkpoint, prompt, generation, generate_device);
      std::fwrite(r.text.data(), 1, r.text.size(), stdout);
      std::fputc('\n', stdout);
      return 0;
    }
    if (*bench) {
      if (!bench_budget.empty()) bench_options.mem_budget = mt::tools::parse_bytes(bench_budget);
      const auto result = bench_ladder ? mt::tools::run_ladder(bench_options) : mt::tools::run_bench(bench_options);
      if (!bench_json.empty()) {
        std::ofstream json(bench_json, std::ios::trunc);
        MT_CHECK(json.good(), "bench: cannot write --json '{}'", bench_json);
        json << mt::tools::bench_json(result, bench_options).dump(2) << '\n';
        MT_CHECK(json.good(), "bench: writing --json '{}' failed", bench_json);
      }
      return 0;
    }
    if (*compare) {
      mt::tools::run_compare(compare_options);
      print_profile();
      return 0;
    }
    if (*report) {
      mt::tools::ReportPage page;
      page.title = "mixtape report";
      for (const std::string& path : report_logs) {
        page.runs.push_back(mt::tools::read_metrics_log(path));
        if (!page.runs.back().problem.empty()) std::fprintf(stderr, "report: %s\n", page.runs.back().problem.c_str());
      }
      page.commands.push_back(config.command);
      mt::tools::write_report(report_out, page);
      std::printf("report of %zu run(s) written to %s\n", page.runs.size(), report_out.c_str());
      return 0;
    }
    if (*check_data) return run_check_data(check_config);
    if (*train) {
      mt::tools::train(config);
      print_profile();
      return 0;
    }
    return 0;
  });
  if (code != 0 && mt::dist::is_distributed()) mt::dist::abort_job(code);
  mt::dist::finalize();
  return code;
}
