// The training loop behind `mixtape train` (and the end-to-end tests): data,
// model, autocast, GradScaler, optimizer, schedule, gradient accumulation,
// clipping, evaluation, metrics and checkpoints, in the order PyTorch's AMP
// recipe uses.
//
// This is tools/train's public entry point: it includes the pieces callers
// use (config.h, checkpoint.h, evaluate.h). The trainer itself is cut along
// its sections: run.cpp builds a run, step.cpp is the training step (read
// it top to bottom), metrics.cpp reports steps, evaluate.cpp and
// checkpoint.cpp evaluate and save, summary.cpp ends a run, and
// trainer.cpp is train() itself.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/moe.h"
#include "tools/train/checkpoint.h"
#include "tools/train/config.h"
#include "tools/train/evaluate.h"
#include "tools/train/memory_report.h"

namespace mt::tools {

struct TrainSummary {
  bool language_model = false;
  double test_accuracy = 0;  // classification: the last evaluation's accuracy
  std::vector<double> epoch_accuracies;
  // Mean cross-entropy per target on the held-out split (nats; per token, so
  // per byte for byte-level text), at the last evaluation and at each.
  double validation_loss = 0;
  double perplexity = 0;  // exp(validation_loss)
  std::vector<double> validation_losses;
  std::vector<double> losses;  // one per optimizer step
  double seconds = 0;
  double samples_per_second = 0;  // training only: evaluation, checkpoints and the first (warm-up) step excluded
  double tokens_per_second = 0;   // language models: samples/s x tokens per window
  int64_t peak_memory_bytes = 0;
  int64_t steps = 0;
  int64_t skipped_steps = 0;
  int64_t parameters = 0;
  // Those one token's forward uses: a mixture of experts counts k of its E
  // experts (models::parameter_counts); equal to `parameters` for a dense model.
  int64_t activated_parameters = 0;
  // A mixture of experts: each MoE layer's router statistics over the
  // training steps before the last evaluation.
  std::vector<models::RouterStatistics> router_statistics;
  double final_scale = 1;
  // Blocking device operations (core/host_sync.h) per optimizer step, over
  // the steps after the first; 0 means the host never waited for the device.
  double host_syncs_per_step = 0;
  int threads = 0;  // CPU threads in use at the end (the tuner's last pick under --threads 0)
  // The device's memory ledger at the peak of the training steps
  // (evaluation and checkpoint writing left out), and its theory.
  MemoryLedger memory_ledger;
  MemoryTheory memory_theory;
  // Bytes of the datasets held in the training device's memory (the CPU's
  // when it trains there): the same for every batch size, so `mixtape
  // bench` leaves them out of its peaks.
  int64_t dataset_bytes = 0;
  int64_t training_samples = 0;  // in the training split (after --train-limit)
  // Tensor bytes on the training device that were alive before train()
  // began (not the run's: other work in the same process).
  int64_t bytes_before = 0;
  // The run's own training peak: the ledger's peak less the dataset and bytes_before.
  int64_t training_peak_bytes() const { return memory_ledger.total_peak - dataset_bytes - bytes_before; }
  // Wall time of each optimizer step of this run, evaluation and checkpoint
  // writing left out (host time: on a GPU it includes the queue's slack).
  std::vector<double> step_seconds;
  // Every record the run logged (steps, evaluations, skips, the dtype report,
  // the summary), kept for the HTML report (--report, keep_records).
  std::vector<nlohmann::json> records;
  // --dtype-report: the first step's rows as JSON (module, op, policy, inputs, compute, output, calls, flag).
  nlohmann::json dtype_report;
};

// Raised when the loss stops being finite; the message has the step, the
// recent loss-scale history and the last finite losses.
class NonFiniteLoss : public Error {
 public:
  using Error::Error;
};

TrainSummary train(const TrainConfig& config, std::FILE* out = stdout);

}  // namespace mt::tools
