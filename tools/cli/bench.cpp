// `mixtape bench`: FP32 vs AMP FP16/BF16 vs AMP at the largest batch that
// fits (or, with --ladder, the low-memory ladder), optionally as JSON.
#include "tools/train/bench.h"

#include <fstream>
#include <memory>

#include "runtime/error.h"
#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/train/output_paths.h"

namespace mt::cli {
namespace {

struct BenchArgs {
  tools::BenchOptions options;
  std::string budget, json;
  std::string device = "auto";  // parsed into options.device when the command runs
  bool ladder = false;
  CLI::Option* old_warmup = nullptr;  // the spelling --warmup-steps replaced
};

int run_bench(BenchArgs& a) {
  MT_CHECK(a.old_warmup->count() == 0,
           "bench: --warmup is now --warmup-steps (the untimed steps before timing); use --warmup-steps N "
           "(--warmup in train and compare is the learning-rate warmup)");
  tools::check_output_paths("bench", {{"--json", a.json}}, {{"--data", a.options.data}});
  if (!a.budget.empty()) a.options.mem_budget = tools::parse_bytes(a.budget);
  a.options.device = tools::parse_device_choice(a.device);
  const auto result = a.ladder ? tools::run_ladder(a.options) : tools::run_bench(a.options);
  if (!a.json.empty()) {
    std::ofstream json(a.json, std::ios::trunc);
    MT_CHECK(json.good(), "bench: cannot write --json '{}'", a.json);
    json << tools::bench_json(result, a.options).dump(2) << '\n';
    MT_CHECK(json.good(), "bench: writing --json '{}' failed", a.json);
  }
  return 0;
}

}  // namespace

Subcommand add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  tools::BenchOptions& o = a->options;
  CLI::App* cmd = app.add_subcommand(
      "bench", "FP32 vs AMP FP16/BF16 vs AMP at the largest batch that fits: peak memory, iterations/s, samples/s");
  add_model_option(cmd, o.model, "the model to measure (default " + auto_model_help() + ")", /*with_auto=*/true);
  add_device_option(cmd, a->device);
  add_integer_option(cmd, "--steps", o.steps, "timed steps per configuration (default 50)", 1);
  add_integer_option(cmd, "--warmup-steps", o.warmup, "untimed steps first (default 5)", 1);
  // Hidden: refused with a message that names --warmup-steps (train's --warmup is the LR warmup).
  a->old_warmup = cmd->add_option("--warmup")->type_name("N")->group("");
  add_integer_option(cmd, "--batch", o.batch, "batch size B of the first three rows (default 128)", 1);
  cmd->add_option("--mem-budget", a->budget,
                  "memory the last row's batch must fit in, e.g. 8GiB or 300MiB (default: the FP32 row's peak)");
  cmd->add_option("--json", a->json, "also write the table, the machine and the commit as JSON");
  cmd->add_option("--data", o.data, "the dataset's directory (as train --data)");
  add_dataset_option(cmd, o.dataset, "as train --dataset (default: the model's)");
  add_integer_option(cmd, "--train-limit", o.train_limit, "use only the first N training samples", 0);
  cmd->add_flag("!--no-progress", o.progress, "no live progress line");
  cmd->add_flag("--ladder", a->ladder,
                "the low-memory ladder at effective batch B: AMP, + gradient accumulation, + activation "
                "checkpointing (transformers)");
  add_integer_option(cmd, "--accum", o.accum, "--ladder: micro-batches per step (default 4)", 1);
  cmd->add_flag("--fp8", o.fp8, "also time amp-fp8: BF16 autocast with FP8 Linear GEMMs at batch B (--fp8-recipe)");
  add_fp8_options(cmd, o.fp8_options);
  return {cmd, [a](const std::string&) { return run_bench(*a); }};
}

}  // namespace mt::cli
