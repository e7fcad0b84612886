// `mixtape compare`: FP32, AMP FP16 and AMP BF16 trained from the same seed,
// drawn on one HTML page.
#include "tools/train/compare.h"

#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"

namespace mt::cli {
namespace {

// The training options compare passes to every run (as train's, fewer).
void add_run_options(CLI::App* cmd, tools::TrainConfig& c) {
  add_device_option(cmd, c.device);
  cmd->add_option("--batch", c.batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--lr", c.lr, "peak learning rate")->check(CLI::PositiveNumber);
  cmd->add_option("--epochs", c.epochs, "epochs the schedule spans (the runs stop at --steps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", c.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--schedule", c.schedule, "constant (default) | cosine | step, over --epochs")
      ->check(CLI::IsMember({"cosine", "constant", "step"}));
  add_seed_option(cmd, c.seed, "random seed, the same for every run");
  cmd->add_option("--data", c.data, "the dataset's directory (as train --data)");
  add_dataset_option(cmd, c.dataset, "as train --dataset");
  cmd->add_option("--context", c.context, "text models: tokens per window")->check(CLI::NonNegativeNumber);
  cmd->add_option("--train-limit", c.train_limit, "use only the first N training samples")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--test-limit", c.test_limit, "use only the first N held-out samples")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", c.threads, "CPU threads (default 0 = timed)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
}

}  // namespace

Subcommand add_compare(CLI::App& app) {
  auto options = std::make_shared<tools::CompareOptions>();
  tools::TrainConfig& c = options->base;
  c.max_steps = 100;
  c.epochs = 1000;          // --steps ends the runs
  c.schedule = "constant";  // a schedule spans --epochs, which --steps cuts short
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train FP32, AMP FP16 (GradScaler) and AMP BF16 from the same seed and draw them on one HTML page");
  add_model_option(cmd, c.model, "the model (default: " + auto_model_help() + ")", /*with_auto=*/true);
  cmd->add_option("--out", options->out, "the HTML report to write")->required();
  cmd->add_option("--steps", c.max_steps, "optimizer steps per run (default 100)")->check(CLI::PositiveNumber);
  cmd->add_option("--precisions", options->precisions, "the runs, in order (default fp32 fp16 bf16)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  add_run_options(cmd, c);
  cmd->add_option("--log-dir", options->log_dir, "also keep each run's metrics log here");
  cmd->add_flag("!--no-progress", c.progress, "no live progress line");
  add_diagnostic_options(cmd, c);
  auto run = [options](const std::string& command_line) {
    options->command = command_line;
    tools::run_compare(*options);
    print_profile();
    return 0;
  };
  return {cmd, run};
}

}  // namespace mt::cli
