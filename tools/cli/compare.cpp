// `mixtape compare`: FP32, AMP FP16 and AMP BF16 trained from the same seed,
// drawn on one HTML page.
#include "tools/train/compare.h"

#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"

namespace mt::cli {
namespace {

struct CompareArgs {
  tools::CompareOptions options;
  std::string device = "auto";  // parsed into options.base.device when the command runs
};

// The training options compare passes to every run (as train's, fewer).
void add_run_options(CLI::App* cmd, tools::TrainConfig& c) {
  add_integer_option(cmd, "--batch", c.batch, "batch size", 1);
  cmd->add_option("--lr", c.optim.lr, "peak learning rate")->check(positive_number());
  add_integer_option(cmd, "--epochs", c.epochs, "epochs the schedule spans (the runs stop at --steps)", 1);
  add_integer_option(cmd, "--warmup", c.optim.warmup, "linear warmup steps", 0);
  add_choice_option(cmd, "--schedule", c.optim.schedule, tools::parse_schedule, {"cosine", "constant", "step"},
                    "constant (default) | cosine | step, over --epochs");
  add_seed_option(cmd, c.seed, "random seed, the same for every run");
  cmd->add_option("--data", c.data.dir, "the dataset's directory (as train --data)");
  add_dataset_option(cmd, c.data.dataset, "as train --dataset");
  add_integer_option(cmd, "--context", c.data.context, "text models: tokens per window", 0);
  add_integer_option(cmd, "--train-limit", c.data.train_limit, "use only the first N training samples", 0);
  add_integer_option(cmd, "--test-limit", c.data.test_limit, "use only the first N held-out samples", 0);
  add_integer_option(cmd, "--threads", c.parallel.threads, "CPU threads (default 0 = timed)", 0, 4096);
}

// --precisions: the runs, each parsed once CLI11 has checked the list.
void add_precisions_option(CLI::App* cmd, std::vector<tools::Precision>& precisions) {
  cmd->add_option_function<std::vector<std::string>>(
         "--precisions",
         [&precisions](const std::vector<std::string>& names) {
           precisions.clear();
           for (const std::string& name : names) precisions.push_back(tools::parse_precision(name));
         },
         "the runs, in order (default fp32 fp16 bf16; fp8 too)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp8"}));
}

}  // namespace

Subcommand add_compare(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  tools::CompareOptions& options = args->options;
  tools::TrainConfig& c = options.base;
  c.max_steps = 100;
  c.epochs = 1000;                                   // --steps ends the runs
  c.optim.schedule = tools::ScheduleKind::Constant;  // a schedule spans --epochs, which --steps cuts short
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train FP32, AMP FP16 (GradScaler) and AMP BF16 from the same seed and draw them on one HTML page");
  add_model_option(cmd, c.model, "the model (default: " + auto_model_help() + ")", /*with_auto=*/true);
  cmd->add_option("--out", options.out, "the HTML report to write")->required();
  add_integer_option(cmd, "--steps", c.max_steps, "optimizer steps per run (default 100)", 1);
  add_precisions_option(cmd, options.precisions);
  add_fp8_options(cmd, c.precision.fp8);
  add_device_option(cmd, args->device);
  add_run_options(cmd, c);
  cmd->add_option("--log-dir", options.log_dir, "also keep each run's metrics log here");
  cmd->add_flag("!--no-progress", c.report.progress, "no live progress line");
  add_diagnostic_options(cmd, c.debug);
  auto run = [args](const std::string& command_line) {
    args->options.base.device = tools::parse_device_choice(args->device);
    args->options.command = command_line;
    tools::run_compare(args->options);
    print_profile();
    return 0;
  };
  return {cmd, run};
}

}  // namespace mt::cli
