// Seeing a run while it trains: its throughput, the metrics log (JSON
// lines), the live progress line, TensorBoard scalars, and what the host
// does with each step's values once they come back from the device (the
// NaN stop, --explain-skips, the scale-collapse warning).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tools/train/device_feed.h"
#include "tools/train/tensorboard.h"

namespace mt::tools {

struct TrainingRun;  // tools/train/run.h

using Clock = std::chrono::steady_clock;

std::string megabytes(int64_t bytes);

// Training throughput in samples/s, evaluation and checkpoint writing
// excluded. It starts counting
// after the first optimizer step, which carries one-time start-up inside the
// loop (cuDNN and cuBLASLt handles and algorithm choice, the caching
// allocator's first blocks, the loader's first batch): on a GPU that is up to
// a second, enough to hide the steady speed of a short run. A run of a single
// step is measured whole.
class Throughput {
 public:
  Throughput() : start_(Clock::now()) {}
  void add_samples(int64_t n) { samples_ += n; }
  void step_done() {
    if (++steps_ != 1) return;
    warm_start_ = Clock::now();
    warm_samples_ = samples_;
  }
  void exclude_seconds(double s) { excluded_ += s; }
  double samples_per_second() const {
    const bool warm = steps_ > 1;
    const double seconds =
        std::chrono::duration<double>(Clock::now() - (warm ? warm_start_ : start_)).count() - excluded_;
    const int64_t counted = samples_ - (warm ? warm_samples_ : 0);
    return seconds > 0 ? static_cast<double>(counted) / seconds : 0.0;
  }
  double wall_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  Clock::time_point start_, warm_start_;
  int64_t samples_ = 0, warm_samples_ = 0, steps_ = 0;
  double excluded_ = 0;  // evaluation and checkpoints (always after the first step)
};

// The metrics log, the records kept for --report, and the progress line.
struct Reporter {
  std::FILE* out;
  bool progress;
  std::ofstream log;
  std::vector<nlohmann::json>* kept = nullptr;  // --report: every record, for the page

  Reporter(std::FILE* o, bool show, const std::string& path, std::vector<nlohmann::json>* keep);

  // One JSON line of the metrics log (and of the report's records).
  void record(const nlohmann::json& line);
  // A step's record, and its progress line (every 100th step when not a terminal).
  void step(const nlohmann::json& m, int64_t epochs, int64_t batches);
  void end_progress();
};

// One step's numbers as TensorBoard scalars, and the memory ledger now.
void write_tensorboard_step(TensorBoardWriter& tb, const nlohmann::json& m, Device device);

// Reports the steps whose values have come back from the device: logs and
// prints each, counts skips, and stops the run (NonFiniteLoss) at a loss
// that is not finite.
void report_steps(TrainingRun& r, const std::vector<StepValues>& arrived, Reporter& reporter,
                  const Throughput& throughput);

// --fp8-stats N: every N steps, each FP8 operand's amax, scales and shares
// of saturated and flushed-to-zero elements since the last report, as a
// {"fp8": ...} record of the log and as TensorBoard scalars (fp8/<weight>/<role>/...).
void report_fp8_statistics(TrainingRun& r, Reporter& reporter);

// --fp8-shadow N: before a step's first micro-batch, whether its FP8
// Linears also run their BF16 twins (every Nth step); after the step, each
// Linear's relative error ||y_fp8 - y_bf16|| / ||y_bf16|| (its last
// micro-batch's): a line on stdout with the worst, a {"fp8_shadow": ...}
// record of the log and TensorBoard scalars (fp8_shadow/<weight>).
void prepare_fp8_shadow(TrainingRun& r);
void report_fp8_shadow(TrainingRun& r, Reporter& reporter);

}  // namespace mt::tools
