#include "tools/train/compare.h"

#include <fmt/format.h>

#include <filesystem>

#include "runtime/error.h"
#include "tools/train/machine.h"
#include "tools/train/output_paths.h"
#include "tools/train/report.h"

namespace mt::tools {

std::string train_command_line(const TrainConfig& c) {
  const TrainConfig defaults;
  std::string line = "mixtape train";
  auto flag = [&](const char* name, const auto& value, const auto& fallback) {
    if (value != fallback) line += fmt::format(" --{} {}", name, value);
  };
  flag("model", c.model, defaults.model);
  flag("precision", precision_choice_name(c.precision.mode), precision_choice_name(defaults.precision.mode));
  flag("device", device_choice_name(c.device), device_choice_name(defaults.device));
  flag("dataset", c.data.dataset, defaults.data.dataset);
  if (!c.data.dir.empty()) line += " --data '" + c.data.dir + "'";
  flag("epochs", c.epochs, defaults.epochs);
  flag("steps", c.max_steps, defaults.max_steps);
  flag("batch", c.batch, defaults.batch);
  flag("lr", c.optim.lr, defaults.optim.lr);
  flag("optimizer", optimizer_name(c.optim.optimizer), optimizer_name(defaults.optim.optimizer));
  flag("schedule", schedule_name(c.optim.schedule), schedule_name(defaults.optim.schedule));
  flag("warmup", c.optim.warmup, defaults.optim.warmup);
  flag("grad-accum", c.optim.grad_accum, defaults.optim.grad_accum);
  flag("clip", c.optim.clip, defaults.optim.clip);
  flag("init-scale", c.precision.init_scale, defaults.precision.init_scale);
  flag("seed", c.seed, defaults.seed);
  flag("context", c.data.context, defaults.data.context);
  flag("train-limit", c.data.train_limit, defaults.data.train_limit);
  flag("test-limit", c.data.test_limit, defaults.data.test_limit);
  flag("threads", c.parallel.threads, defaults.parallel.threads);
  if (c.precision.mode == Precision::Fp8) {
    const Fp8Options& f = c.precision.fp8;
    const Fp8Options fallback;
    flag("fp8-recipe", amp::fp8_recipe_name(f.recipe), amp::fp8_recipe_name(fallback.recipe));
    flag("fp8-history", f.history, fallback.history);
    flag("fp8-margin", f.margin, fallback.margin);
    flag("fp8-stats", f.stats_every, fallback.stats_every);
    flag("fp8-shadow", f.shadow_every, fallback.shadow_every);
    if (f.keep_bf16 != fallback.keep_bf16) line += fmt::format(" --fp8-keep-bf16 {}", fmt::join(f.keep_bf16, ","));
  }
  if (c.precision.master_weights) line += " --master-weights";
  if (c.debug.dtype_report) line += " --dtype-report";
  if (c.debug.explain_skips > 0) line += fmt::format(" --explain-skips {}", c.debug.explain_skips);
  if (c.debug.detect_anomaly) line += " --detect-anomaly";
  return line;
}

namespace {

// The metrics log of each run under --log-dir ("" without it).
std::string run_log_path(const CompareOptions& options, const std::string& precision) {
  return options.log_dir.empty() ? std::string() : options.log_dir + "/compare-" + precision + ".jsonl";
}

// --out and the runs' logs: none the same file as another or as --data, none a
// device, each in a folder that exists.
void check_compare_outputs(const CompareOptions& options) {
  std::vector<OutputPath> outputs = {{"--out", options.out}};
  for (const Precision p : options.precisions) {
    outputs.push_back({"the " + precision_name(p) + " run's log", run_log_path(options, precision_name(p))});
  }
  check_output_paths("compare", outputs, {{"--data", options.base.data.dir}});
  check_output_folder("compare: --out", options.out);
  if (!options.log_dir.empty()) {
    MT_CHECK(std::filesystem::is_directory(options.log_dir), "compare: --log-dir '{}' is not a folder",
             options.log_dir);
  }
}

}  // namespace

std::vector<TrainSummary> run_compare(const CompareOptions& options, std::FILE* out) {
  MT_CHECK(!options.out.empty(), "compare: --out (the HTML report to write) is required");
  MT_CHECK(!options.precisions.empty(), "compare: no precision to train");
  check_compare_outputs(options);
  ReportPage page;
  std::vector<TrainSummary> summaries;
  std::vector<std::string> names;
  for (const Precision p : options.precisions) names.push_back(precision_name(p));
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& precision = names[i];
    TrainConfig c = options.base;
    c.precision.mode = options.precisions[i];
    c.report.record_grad_norm = true;
    c.report.keep_records = true;
    c.debug.dtype_report = true;
    c.report.log = run_log_path(options, precision);
    c.report.command = train_command_line(c);
    std::fprintf(out, "\n== %s: %s\n", precision.c_str(), c.report.command.c_str());
    summaries.push_back(train(c, out));
    RunRecord run = run_from_records(summaries.back().records, precision);
    if (!c.report.log.empty()) run.source = c.report.log;
    page.runs.push_back(std::move(run));
  }
  const TrainConfig& first = options.base;
  page.title = fmt::format("mixtape compare: {} in {}", first.model, fmt::join(names, " vs "));
  page.machine = machine_json(resolve_device(first.device));
  page.commit = source_commit();
  if (!options.command.empty()) page.commands.push_back(options.command);
  write_report(options.out, page);

  // Memory is the training steps' peak: the dataset held in memory is the same for every run.
  std::fprintf(out, "\n%-6s %10s %22s %12s %16s %8s\n", "run", "final loss", "held-out", "samples/s", "training MiB",
               "skipped");
  const double base_speed = summaries.front().samples_per_second;
  const double base_peak = static_cast<double>(summaries.front().training_peak_bytes());
  for (size_t i = 0; i < summaries.size(); ++i) {
    const TrainSummary& s = summaries[i];
    const std::string held_out = s.language_model ? fmt::format("val loss {:.4f}", s.validation_loss)
                                                  : fmt::format("accuracy {:.2f}%", 100 * s.test_accuracy);
    std::fprintf(out, "%-6s %10.4f %22s %12.0f %16.2f %8lld   (%.2fx speed, %.0f%% memory vs %s)\n", names[i].c_str(),
                 s.losses.empty() ? NAN : s.losses.back(), held_out.c_str(), s.samples_per_second,
                 static_cast<double>(s.training_peak_bytes()) / (1 << 20), static_cast<long long>(s.skipped_steps),
                 s.samples_per_second / base_speed, 100.0 * static_cast<double>(s.training_peak_bytes()) / base_peak,
                 names.front().c_str());
  }
  std::fprintf(out, "report written to %s\n", options.out.c_str());
  return summaries;
}

}  // namespace mt::tools
