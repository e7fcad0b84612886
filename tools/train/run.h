// TrainingRun: the state of one `mixtape train` run, and the factories that
// build it (run.cpp). Internal to tools/train: its .cpp files share what
// is declared here; callers use trainer.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/threads.h"
#include "distributed/ddp.h"
#include "distributed/fsdp.h"
#include "distributed/zero.h"
#include "models/registry.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tools/data/loader.h"
#include "tools/data/registry.h"
#include "tools/train/device_feed.h"
#include "tools/train/metrics.h"
#include "tools/train/step.h"
#include "tools/train/tensorboard.h"
#include "tools/train/trainer.h"

namespace mt::tools {

using data::Splits;  // test: the held-out split (Brown's validation documents for text)

// The splits of the dataset `c` names, checked against the model's task (config.cpp).
Splits load_data(const TrainConfig& c, const models::ModelInfo& model,
                 data::LabelCheck labels = data::LabelCheck::Refuse);

// Everything one `mixtape train` run holds, built in the order PyTorch's AMP
// recipe uses: data, model, loader, optimizer, schedule, scaler, checkpoint.
struct TrainingRun {
  TrainConfig c;
  Device device;
  Precision precision;
  models::ModelInfo model_info;
  int64_t tokens_per_sample = 1;  // language models: the window length
  Splits splits;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<optim::Optimizer> owned_opt;
  optim::Optimizer* opt = nullptr;  // owned_opt, or under --shard-optimizer / --shard the shard's
  std::unique_ptr<dist::ShardedOptimizer> zero;
  std::unique_ptr<dist::FullyShardedDataParallel> fsdp;  // --shard grads | params
  std::unique_ptr<optim::LrScheduler> scheduler;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<amp::Fp8State> fp8;  // --precision fp8: each Linear's FP8 scaling
  // Data parallel (`mpirun -np N mixtape train`): this process's rank, the
  // world size, and the model wrapped for gradient averaging (null in a world of one).
  int rank = 0, world = 1;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<BatchStager> stager;
  std::unique_ptr<StepMetrics> metrics;
  CheckpointPosition pos;
  int64_t batches = 0, steps_per_epoch = 0;
  TrainSummary summary;
  std::deque<double> recent_losses, recent_scales;

  // Host syncs counted over the steps after this process's first (the steady state).
  int64_t steps_this_run = 0, steady_syncs = 0, steady_steps = 0;

  // The micro-batches of the optimizer step in progress.
  int64_t micro = 0;
  Tensor accumulated_loss;  // on the device, detached

  // Fault injection for the tests of skip-together (MT_TEST_NONFINITE_GRADIENT=rank:step):
  // on that rank, the step's first gradient the optimizer sees gets an inf. -1: none.
  int inject_rank = -1;
  int64_t inject_step = -1;

  std::unique_ptr<GraphedStep> graphed;  // --cuda-graph
  std::unique_ptr<ThreadTuner> tuner;    // --threads 0 on the CPU
  std::unique_ptr<TensorBoardWriter> tensorboard;
  MemoryLedger training_memory;     // the ledger at the highest training peak so far
  Clock::time_point last_step_end;  // when the last step ended, or the last pause

  // The debugging aids (tools/train/report.h, autograd/anomaly.h, autograd/dtype_report.h).
  bool dtype_report_done = false;
  std::vector<std::string> nonfinite_names;  // --explain-skips: the name of each flagged gradient
  int64_t skips_seen = 0;
  double last_finite_grad_norm = NAN;
};

// Work that is not a step (evaluation, checkpoints) has happened: neither the
// step times nor the thread tuner count it.
void restart_step_clock(TrainingRun& r);

// Keeps the ledger if this stretch of training peaked higher than any before;
// called before evaluating or saving, whose memory is not a training step's.
void note_training_memory(TrainingRun& r);

// Fills `r` in place from the configuration: the loader keeps a reference to r.splits.
void setup_run(TrainingRun& r, const TrainConfig& requested);

// "a,b,c": the units' shard sizes of a fully sharded run, which its sharded
// checkpoints record and must match to resume.
std::string shard_layout_name(const dist::FullyShardedDataParallel& fsdp);

// What the run's optimizer keeps per parameter (the memory theory).
OptimizerStateTheory optimizer_state_theory(const TrainingRun& r);

// Evaluates on the held-out split, prints and logs the result, and keeps it
// in the summary; its time is not training time (evaluate.cpp).
void evaluate_and_report(TrainingRun& r, const std::string& when, Reporter& reporter, Throughput& throughput);

// The kernels' thread count for the run (--threads), restored afterwards.
class RunThreads {
 public:
  explicit RunThreads(TrainingRun& r);
  ~RunThreads() { set_num_threads(previous_); }
  RunThreads(const RunThreads&) = delete;
  RunThreads& operator=(const RunThreads&) = delete;

 private:
  int previous_;
};

// The CPU allocator's cap for TrainConfig::memory_budget, lifted afterwards.
class CpuMemoryCap {
 public:
  explicit CpuMemoryCap(int64_t bytes) : previous_(bytes > 0 ? set_cpu_memory_limit(bytes) : -1) {}
  ~CpuMemoryCap() {
    if (previous_ >= 0) set_cpu_memory_limit(previous_);
  }
  CpuMemoryCap(const CpuMemoryCap&) = delete;
  CpuMemoryCap& operator=(const CpuMemoryCap&) = delete;

 private:
  int64_t previous_;
};

}  // namespace mt::tools
