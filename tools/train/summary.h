// The end of a run: its summary line, record and TrainSummary fields, the
// --dtype-report table, the --report page (also when the run fails), and
// which rank writes any of it.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace mt::tools {

struct TrainingRun;  // tools/train/run.h
struct Reporter;     // tools/train/metrics.h

// Fills the summary's last fields, prints its line (and --memory's,
// --dtype-report's tables) and logs it.
void write_summary(TrainingRun& r, std::FILE* out, Reporter& reporter);

// The --dtype-report table: one line per module, op and dtypes, flagged rows marked.
void print_dtype_report(std::FILE* out, const nlohmann::json& rows);

// --report: the page of this run, from the records it logged.
void write_run_report(const TrainingRun& r);

// Ranks other than 0 write their report lines nowhere.
class QuietUnlessRankZero {
 public:
  QuietUnlessRankZero(int rank, std::FILE* out) : out_(out) {
    if (rank == 0) return;
    null_ = std::fopen("/dev/null", "w");
    MT_CHECK(null_ != nullptr, "train: cannot open /dev/null for rank {}'s output", rank);
    out_ = null_;
  }
  ~QuietUnlessRankZero() {
    if (null_ != nullptr) std::fclose(null_);
  }
  QuietUnlessRankZero(const QuietUnlessRankZero&) = delete;
  QuietUnlessRankZero& operator=(const QuietUnlessRankZero&) = delete;
  std::FILE* out() const { return out_; }

 private:
  std::FILE* out_;
  std::FILE* null_ = nullptr;
};

// Writes the report of what was logged when training ends in an exception
// (a NaN loss, an anomaly), so the curves up to the failure can be seen.
class ReportOnError {
 public:
  ReportOnError(const TrainingRun& r, const Reporter& reporter) : r_(r), reporter_(reporter) {}
  ~ReportOnError();
  ReportOnError(const ReportOnError&) = delete;
  ReportOnError& operator=(const ReportOnError&) = delete;

 private:
  const TrainingRun& r_;
  const Reporter& reporter_;
};

}  // namespace mt::tools
