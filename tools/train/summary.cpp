#include "tools/train/summary.h"

#include <exception>
#include <string>

#include "tools/train/machine.h"
#include "tools/train/report.h"
#include "tools/train/run.h"

namespace mt::tools {

namespace {

// The summary's fields that are known only at the end: steps, final scale,
// threads, the training peak's ledger and its theory, syncs per step.
void fill_summary(TrainingRun& r) {
  TrainSummary& summary = r.summary;
  summary.peak_memory_bytes = memory_stats(r.device).peak_bytes;
  summary.steps = r.pos.step;
  summary.final_scale = r.scaler->get_scale();
  summary.threads = num_threads();
  note_training_memory(r);
  summary.memory_ledger = r.training_memory;
  summary.memory_theory =
      r.fsdp
          ? fsdp_memory_theory(*r.fsdp, optimizer_state_theory(r), r.c.optim.grad_accum > 1)
          : memory_theory(*r.model, r.c.precision.master_weights, optimizer_state_theory(r),
                          {.world = r.world,
                           .ddp = r.ddp != nullptr,
                           .shard_optimizer = r.c.parallel.shard_optimizer,
                           .shards = r.zero ? &r.zero->layout() : nullptr});
  if (r.fp8) {
    const amp::Fp8MemoryTheory fp8 = r.fp8->memory_theory();
    summary.memory_theory.fp8_activations = r.c.memory.checkpoint_activations ? -1 : fp8.activations;
    summary.memory_theory.fp8_weight_casts = fp8.weight_casts;
    summary.memory_theory.fp8_state = fp8.state;
  }
  summary.host_syncs_per_step =
      r.steady_steps > 0 ? static_cast<double>(r.steady_syncs) / static_cast<double>(r.steady_steps) : 0.0;
}

// The run's one-line result: accuracy or perplexity, steps, time, speed, memory, skips, threads.
void print_summary_line(const TrainingRun& r, std::FILE* out) {
  const TrainSummary& summary = r.summary;
  const std::string result =
      summary.language_model
          ? fmt::format("validation loss {:.4f} (perplexity {:.2f})", summary.validation_loss, summary.perplexity)
          : fmt::format("test accuracy {:.2f}%", 100.0 * summary.test_accuracy);
  const std::string speed = summary.language_model ? fmt::format("{:.0f} tokens/s", summary.tokens_per_second)
                                                   : fmt::format("{:.0f} samples/s", summary.samples_per_second);
  const std::string threads = r.device.type == DeviceType::CPU
                                  ? fmt::format(", {} CPU thread{}{}", summary.threads, summary.threads == 1 ? "" : "s",
                                                r.tuner ? " (timed)" : "")
                                  : std::string();
  std::fprintf(out, "%s  |  %lld steps in %.1f s, %s, peak memory %s, skipped steps %lld%s\n", result.c_str(),
               static_cast<long long>(summary.steps), summary.seconds, speed.c_str(),
               megabytes(summary.peak_memory_bytes).c_str(), static_cast<long long>(summary.skipped_steps),
               threads.c_str());
}

// The summary's record, the last line of the metrics log.
nlohmann::json summary_record(const TrainingRun& r) {
  const TrainSummary& summary = r.summary;
  nlohmann::json record = {{"seconds", summary.seconds},
                           {"samples_per_s", summary.samples_per_second},
                           {"peak_memory_bytes", summary.peak_memory_bytes},
                           {"training_peak_bytes", summary.training_peak_bytes()},
                           {"dataset_bytes", summary.dataset_bytes},
                           {"steps", summary.steps},
                           {"skipped_steps", summary.skipped_steps},
                           {"final_scale", summary.final_scale},
                           {"host_syncs_per_step", summary.host_syncs_per_step},
                           {"threads", summary.threads},
                           {"memory_ledger", memory_report_json(summary.memory_ledger, summary.memory_theory)},
                           {"parameters", summary.parameters},
                           {"activated_parameters", summary.activated_parameters},
                           {"config", config_json(r.c)}};
  if (summary.language_model) {
    record["validation_loss"] = summary.validation_loss;
    record["perplexity"] = summary.perplexity;
    record["validation_losses"] = summary.validation_losses;
    record["tokens_per_s"] = summary.tokens_per_second;
  } else {
    record["test_accuracy"] = summary.test_accuracy;
    record["epoch_accuracies"] = summary.epoch_accuracies;
  }
  record["device"] = r.device.str();
  if (!r.c.report.command.empty()) record["command"] = r.c.report.command;
  return record;
}

}  // namespace

// The --dtype-report table: one line per module, op and dtypes, flagged rows marked.
void print_dtype_report(std::FILE* out, const nlohmann::json& rows) {
  std::fprintf(
      out, "autocast dtype report (first step's forward): module | op | policy | inputs -> ran in -> output | calls\n");
  int64_t flagged = 0;
  for (const nlohmann::json& row : rows) {
    const std::string flag = row["flag"].get<std::string>();
    const std::string not_fp8 = row.value("fp8", std::string());
    const std::string note = !flag.empty() ? "  ! " + flag : !not_fp8.empty() ? "  not FP8: " + not_fp8 : "";
    flagged += flag.empty() ? 0 : 1;
    std::fprintf(out, "  %s %-28s %-22s %-16s %-28s -> %-4s -> %-4s x%lld%s\n", flag.empty() ? " " : "!",
                 row["module"].get<std::string>().c_str(), row["op"].get<std::string>().c_str(),
                 row["policy"].get<std::string>().c_str(), row["inputs"].get<std::string>().c_str(),
                 row["compute"].get<std::string>().c_str(), row["output"].get<std::string>().c_str(),
                 static_cast<long long>(row["calls"].get<int64_t>()), note.c_str());
  }
  std::fprintf(out, "%lld row(s) flagged: f32 activations under autocast (each costs f32 memory when saved)\n",
               static_cast<long long>(flagged));
}

void write_summary(TrainingRun& r, std::FILE* out, Reporter& reporter) {
  fill_summary(r);
  print_summary_line(r, out);
  const TrainSummary& summary = r.summary;
  if (r.c.report.memory) {
    print_memory_report(out, summary.memory_ledger, summary.memory_theory, r.device.str());
    std::fprintf(
        out, "parameters: %lld in all, %lld activated per token%s\n", static_cast<long long>(summary.parameters),
        static_cast<long long>(summary.activated_parameters),
        summary.activated_parameters == summary.parameters ? "" : " (each token runs k of each layer's experts)");
  }
  if (r.c.debug.dtype_report && summary.dtype_report.is_array()) {
    print_dtype_report(out, summary.dtype_report);
    reporter.record({{"dtype_report", summary.dtype_report}});
  }
  reporter.record(nlohmann::json{{"summary", summary_record(r)}});
}

// --report: the page of this run, from the records it logged.
void write_run_report(const TrainingRun& r) {
  const RunRecord run = run_from_records(r.summary.records, precision_name(r.precision));
  ReportPage page;
  page.title = fmt::format("mixtape train: {} in {} on {}", r.c.model, precision_name(r.precision), r.device.str());
  page.runs = {run};
  page.machine = machine_json(r.device);
  page.commit = source_commit();
  write_report(r.c.report.html, page);
  std::fprintf(stderr, "report written to %s\n", r.c.report.html.c_str());
}

ReportOnError::~ReportOnError() {
  if (std::uncaught_exceptions() == 0 || r_.c.report.html.empty() || reporter_.kept == nullptr) return;
  try {
    write_run_report(r_);
  } catch (const std::exception&) {  // the first error is the one to report
  }
}

}  // namespace mt::tools
