// `mixtape compare`: FP32 against AMP on one model, drawn on one page.
//
// Trains the same model from the same seed on the same data order in fp32,
// fp16 (autocast + GradScaler) and bf16 (autocast), one run after another,
// with the gradient norm measured every step, prints a table, and writes the
// HTML report (tools/train/report.h) with every run's curves, throughput, memory
// ledger and autocast dtype report side by side.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tools/train/trainer.h"

namespace mt::tools {

struct CompareOptions {
  TrainConfig base;  // model, device, data, steps, batch, seed, ...: all but the precision
  std::vector<Precision> precisions = {Precision::Fp32, Precision::Fp16, Precision::Bf16};
  std::string out;      // the HTML report
  std::string log_dir;  // also keep each run's metrics log here (compare-<precision>.jsonl), when set
  std::string command;  // the compare command line, for the page
};

std::vector<TrainSummary> run_compare(const CompareOptions& options, std::FILE* out = stdout);

// The `mixtape train` command that runs `c` (the flags that differ from the defaults).
std::string train_command_line(const TrainConfig& c);

}  // namespace mt::tools
