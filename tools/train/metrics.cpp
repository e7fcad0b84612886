#include "tools/train/metrics.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "autograd/anomaly.h"
#include "core/allocator.h"
#include "tools/train/run.h"

namespace mt::tools {

// ---------------------------------------------------------------- progress and the metrics log

std::string megabytes(int64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / (1 << 20)); }

Reporter::Reporter(std::FILE* o, bool show, const std::string& path, std::vector<nlohmann::json>* keep)
    : out(o), progress(show && ::isatty(2)), kept(keep) {
  if (!path.empty()) {
    log.open(path, std::ios::trunc);
    MT_CHECK(log.good(), "cannot write the metrics log '{}'", path);
  }
}

void Reporter::record(const nlohmann::json& line) {
  if (log.is_open()) log << line.dump() << '\n';
  if (kept != nullptr) kept->push_back(line);
}

void Reporter::step(const nlohmann::json& m, int64_t epochs, int64_t batches) {
  record(m);
  const int64_t step = m["step"].get<int64_t>();
  const std::string line = fmt::format(
      "epoch {}/{} step {} batch {}/{} loss {:.4f} lr {:.2e} scale {:g} {:.0f} samples/s mem {} (peak {})",
      m["epoch"].get<int64_t>() + 1, epochs, step, m["batch"].get<int64_t>() + 1, batches, m["loss"].get<double>(),
      m["lr"].get<double>(), m["scale"].get<double>(), m["samples_per_s"].get<double>(),
      megabytes(m["memory_bytes"].get<int64_t>()), megabytes(m["peak_memory_bytes"].get<int64_t>()));
  if (progress) {
    std::fprintf(stderr, "\r%-120s", line.c_str());
    std::fflush(stderr);
  } else if (step % 100 == 0) {
    std::fprintf(out, "%s\n", line.c_str());
  }
}

void Reporter::end_progress() {
  if (progress) std::fprintf(stderr, "\n");
}

// One step's numbers as TensorBoard scalars, and the memory ledger now.
void write_tensorboard_step(TensorBoardWriter& tb, const nlohmann::json& m, Device device) {
  const int64_t step = m["step"].get<int64_t>();
  for (const char* key : {"loss", "lr", "scale", "grad_norm", "samples_per_s"}) {
    if (m.contains(key)) tb.scalar(std::string("train/") + key, m[key].get<double>(), step);
  }
  const MemoryLedger ledger = memory_ledger(device);
  for (const MemoryCategory category : all_memory_categories()) {
    tb.scalar(std::string("memory/") + memory_category_name(category), static_cast<double>(ledger[category]), step);
  }
}

// ---------------------------------------------------------------- the values of each step

namespace {

[[noreturn]] void stop_on_non_finite(TrainingRun& r, const StepValues& v, Reporter& reporter) {
  reporter.end_progress();
  const std::string norm = std::isfinite(r.last_finite_grad_norm)
                               ? fmt::format(" Last finite gradient norm: {:.6g}.", r.last_finite_grad_norm)
                               : std::string(r.c.optim.clip > 0 || r.c.report.record_grad_norm
                                                 ? " No finite gradient norm was measured."
                                                 : " (Gradient norms are measured with --clip or --report.)");
  const std::string& overflow = autograd::last_backward_overflow();
  const std::string anomaly =
      !r.c.debug.detect_anomaly ? " Run with --detect-anomaly to name the op that produces the first NaN or inf."
      : overflow.empty()        ? " Anomaly mode saw no non-finite value in any op's forward or backward."
                                : fmt::format(" Anomaly mode: {}.", overflow);
  std::string fp8;
  if (r.fp8) {
    const std::string operand = r.fp8->first_nonfinite_operand(*r.model);
    fp8 = !operand.empty() ? fmt::format(" FP8: the first operand to go non-finite was {}.", operand)
          : r.fp8->recipe().kind == amp::Fp8RecipeKind::Delayed || r.fp8->collects_statistics()
              ? " FP8: every recorded amax is finite."
              : " FP8: run with --fp8-recipe delayed or --fp8-stats N to see which FP8 operand went bad.";
  }
  throw NonFiniteLoss(fmt::format(
      "the loss became {} at step {} (epoch {}). Recent loss scales: [{}]. Last finite losses: [{}].{}{}{} {}", v.loss,
      v.step, v.epoch + 1, fmt::join(r.recent_scales, ", "), fmt::join(r.recent_losses, ", "), norm, anomaly, fp8,
      r.c.checkpoint.save.empty() ? "No checkpoint was being written."
      : std::filesystem::exists(r.c.checkpoint.save)
          ? fmt::format("The last good checkpoint '{}' was kept.", r.c.checkpoint.save)
          : "No checkpoint had been written yet."));
}

// --explain-skips: at the first skip and every Nth after it, the parameters
// whose gradients held the inf/NaN, printed and logged.
void explain_skip(TrainingRun& r, const StepValues& v, Reporter& reporter) {
  const int64_t every = r.c.debug.explain_skips;
  if (every <= 0 || (r.skips_seen++ % every) != 0) return;
  std::vector<std::string> names;
  for (size_t i = 0; i < v.nonfinite.size(); ++i) {
    if (!v.nonfinite[i]) continue;
    names.push_back(i < r.nonfinite_names.size() ? r.nonfinite_names[i] : fmt::format("parameter #{}", i));
  }
  const std::string list = names.empty() ? "none of this rank's gradients (another rank's held it)"
                                         : fmt::format("{}", fmt::join(names, ", "));
  if (reporter.progress) std::fprintf(stderr, "\n");
  std::fprintf(reporter.out, "step %lld skipped (skip %lld): inf/NaN gradients in %s\n", static_cast<long long>(v.step),
               static_cast<long long>(r.skips_seen), list.c_str());
  reporter.record({{"skip", {{"step", v.step}, {"scale", v.scale}, {"parameters", names}}}});
}

// f16 only: the scale has just fallen below 1, which no amount of backing off cures.
void warn_if_scale_collapsed(const TrainingRun& r, const StepValues& v) {
  if (r.scaler->is_enabled() && v.scale < 1.0 && (r.recent_scales.empty() || r.recent_scales.back() >= 1.0)) {
    spdlog::warn(
        "GradScaler: the loss scale fell to {:g} (< 1) at step {}: gradients overflow f16 even unscaled. Try "
        "bf16 autocast (no scaler needed) or look for the op producing inf.",
        v.scale, v.step);
  }
}

// The last eight losses and scales, for NonFiniteLoss's message.
void remember_recent(TrainingRun& r, const StepValues& v) {
  r.recent_losses.push_back(v.loss);
  r.recent_scales.push_back(v.scale);
  if (r.recent_losses.size() > 8) r.recent_losses.pop_front();
  if (r.recent_scales.size() > 8) r.recent_scales.pop_front();
}

// The step's line of the metrics log.
nlohmann::json step_record(const TrainingRun& r, const StepValues& v, const Throughput& throughput) {
  const AllocatorStats mem = memory_stats(r.device);
  nlohmann::json m = {{"step", v.step},
                      {"epoch", v.epoch},
                      {"batch", v.batch},
                      {"loss", v.loss},
                      {"lr", r.scheduler->base_lr() * v.lr_factor},
                      {"scale", v.scale},
                      {"samples_per_s", throughput.samples_per_second()},
                      {"memory_bytes", mem.current_bytes},
                      {"peak_memory_bytes", mem.peak_bytes},
                      {"skipped", v.skipped}};
  if (std::isfinite(v.grad_norm)) m["grad_norm"] = v.grad_norm;
  return m;
}

}  // namespace

void report_fp8_statistics(TrainingRun& r, Reporter& reporter) {
  const int64_t every = r.c.precision.fp8.stats_every;
  if (!r.fp8 || every <= 0 || r.pos.step % every != 0) return;
  nlohmann::json tensors = nlohmann::json::array();
  for (const amp::Fp8TensorStatistics& s : r.fp8->take_statistics(*r.model)) {
    tensors.push_back({{"parameter", s.parameter},
                       {"role", s.role},
                       {"amax", s.amax},
                       {"scale_min", s.scale_min},
                       {"scale_max", s.scale_max},
                       {"saturated", s.saturated},
                       {"flushed", s.flushed},
                       {"elements", s.elements}});
    if (r.tensorboard) {
      const std::string tag = "fp8/" + s.parameter + "/" + s.role + "/";
      r.tensorboard->scalar(tag + "amax", s.amax, r.pos.step);
      r.tensorboard->scalar(tag + "scale_min", s.scale_min, r.pos.step);
      r.tensorboard->scalar(tag + "saturated", s.saturated, r.pos.step);
      r.tensorboard->scalar(tag + "flushed", s.flushed, r.pos.step);
    }
  }
  reporter.record({{"fp8", {{"step", r.pos.step}, {"recipe", r.fp8->recipe().name()}, {"tensors", tensors}}}});
}

void prepare_fp8_shadow(TrainingRun& r) {
  const int64_t every = r.c.precision.fp8.shadow_every;
  if (r.fp8 && every > 0) r.fp8->shadow_forward((r.pos.step + 1) % every == 0);
}

void report_fp8_shadow(TrainingRun& r, Reporter& reporter) {
  const int64_t every = r.c.precision.fp8.shadow_every;
  if (!r.fp8 || every <= 0 || r.pos.step % every != 0) return;
  r.fp8->shadow_forward(false);
  const std::vector<std::pair<std::string, double>> errors = r.fp8->take_shadow_errors(*r.model);
  if (errors.empty()) return;
  nlohmann::json table = nlohmann::json::object();
  const auto worst = std::max_element(errors.begin(), errors.end(), [](const auto& a, const auto& b) {
    return std::isnan(b.second) || (!std::isnan(a.second) && a.second < b.second);  // a NaN is the worst
  });
  for (const auto& [weight, error] : errors) {
    table[weight] = std::isfinite(error) ? nlohmann::json(error) : nlohmann::json(nullptr);
    if (r.tensorboard) r.tensorboard->scalar("fp8_shadow/" + weight, error, r.pos.step);
  }
  if (reporter.progress) std::fprintf(stderr, "\n");
  std::fprintf(reporter.out,
               "step %lld FP8 shadow: the largest relative error against the BF16 twin is %.3g in %s (%zu FP8 "
               "Linears)\n",
               static_cast<long long>(r.pos.step), worst->second, worst->first.c_str(), errors.size());
  reporter.record({{"fp8_shadow", {{"step", r.pos.step}, {"recipe", r.fp8->recipe().name()}, {"errors", table}}}});
}

void report_steps(TrainingRun& r, const std::vector<StepValues>& arrived, Reporter& reporter,
                  const Throughput& throughput) {
  for (const StepValues& v : arrived) {
    if (!std::isfinite(v.loss)) stop_on_non_finite(r, v, reporter);
    if (v.skipped) {
      ++r.summary.skipped_steps;
      explain_skip(r, v, reporter);
    }
    if (std::isfinite(v.grad_norm)) r.last_finite_grad_norm = v.grad_norm;
    warn_if_scale_collapsed(r, v);
    remember_recent(r, v);
    r.summary.losses.push_back(v.loss);
    const nlohmann::json m = step_record(r, v, throughput);
    if (r.tensorboard) write_tensorboard_step(*r.tensorboard, m, r.device);
    reporter.step(m, r.c.epochs, r.batches);
  }
}

}  // namespace mt::tools
