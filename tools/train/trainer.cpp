// train(): build the run (run.cpp), train it epoch by epoch (each step in
// step.cpp), evaluating and saving at each epoch's end, and summarise it
// (summary.cpp).
#include "tools/train/trainer.h"

#include <chrono>
#include <optional>

#include "autograd/anomaly.h"
#include "tools/train/run.h"
#include "tools/train/summary.h"

namespace mt::tools {

namespace {

// ", optimizer state sharded" and the like: what the ranks split.
std::string sharding_description(const TrainingRun& r) {
  const ParallelOptions& p = r.c.parallel;
  if (p.shard_optimizer) return ", optimizer state sharded";
  if (p.shard == ShardLevel::None) return "";
  const std::string what =
      p.shard == ShardLevel::Params ? "parameters, gradients and optimizer state" : "gradients and optimizer state";
  return fmt::format(", FSDP: {} sharded over {} units, gathered in {}, reduced in {}", what,
                     r.fsdp->unit_parameters().size(), dtype_name(r.model->parameters().front().dtype()),
                     dtype_name(p.reduce_dtype));
}

// What is about to train, on what, in which precision, and how it is split over ranks.
void print_run_banner(const TrainingRun& r, std::FILE* out) {
  const TrainConfig& c = r.c;
  const std::string ranks =
      r.world > 1 || r.ddp || r.fsdp
          ? fmt::format(" per rank x {} rank{} ({}{}{})", r.world, r.world > 1 ? "s" : "",
                        dist::group_for(r.device).backend(), r.ddp ? ", DDP" : "", sharding_description(r))
          : std::string();
  const std::string activated = r.summary.activated_parameters == r.summary.parameters
                                    ? std::string()
                                    : fmt::format(", {} activated per token", r.summary.activated_parameters);
  std::fprintf(out, "training %s (%lld parameters%s) on %s in %s%s, %s, batch %lld x %lld%s, %lld steps per epoch\n",
               c.model.c_str(), static_cast<long long>(r.summary.parameters), activated.c_str(), r.device.str().c_str(),
               precision_name(r.precision).c_str(), c.precision.master_weights ? " with f32 master weights" : "",
               optimizer_name(c.optim.optimizer).c_str(), static_cast<long long>(c.batch),
               static_cast<long long>(c.optim.grad_accum), ranks.c_str(), static_cast<long long>(r.steps_per_epoch));
}

// Bytes of the datasets in the training device's memory: counted when it is the CPU.
int64_t dataset_bytes(const TrainingRun& r) {
  int64_t bytes = 0;
  if (r.device.is_cpu()) {
    for (const data::TensorDataset* d : {&r.splits.train, &r.splits.test}) {
      for (const Tensor* t : {&d->inputs, &d->targets}) bytes += static_cast<int64_t>(t->storage()->nbytes());
    }
  }
  return bytes;
}

// --save at an epoch's end (or when stopping); its time and memory are not training's.
void save_epoch_checkpoint(TrainingRun& r, Throughput& throughput) {
  const auto saving = Clock::now();
  note_training_memory(r);
  if (!r.c.checkpoint.save.empty() && r.c.checkpoint.sharded) {
    save_sharded_checkpoint(r.c.checkpoint.save, r.c, *r.model,
                            {r.fsdp->master_shard(), r.opt->state_dict(), shard_layout_name(*r.fsdp)}, *r.scaler,
                            *r.scheduler, r.pos, r.rank, r.world);
  } else if (!r.c.checkpoint.save.empty()) {
    // Consolidating ZeRO's and FSDP's shards is a collective: every rank takes part, rank 0 writes.
    const optim::StateDict optimizer_state = r.zero   ? r.zero->consolidated_state_dict()
                                             : r.fsdp ? r.fsdp->consolidated_state_dict()
                                                      : r.opt->state_dict();
    std::optional<dist::FullyShardedDataParallel::FullParameters> whole;  // the model's state, unsharded
    if (r.fsdp) whole.emplace(*r.fsdp);
    if (r.rank == 0)
      save_checkpoint(r.c.checkpoint.save, r.c, *r.model, optimizer_state, *r.scaler, *r.scheduler, r.pos, r.fp8.get());
  }
  throughput.exclude_seconds(std::chrono::duration<double>(Clock::now() - saving).count());
  restart_step_clock(r);
  reset_memory_ledger_peak(r.device);
}

}  // namespace

TrainSummary train(const TrainConfig& requested, std::FILE* out) {
  MT_CHECK(requested.memory.budget >= 0, "train: the memory budget must not be negative");
  const int64_t cpu_bytes_before = memory_stats(kCPU).current_bytes;
  const int64_t device_tensors_before = memory_ledger(resolve_device(requested.device)).total_current;
  TrainingRun r;
  setup_run(r, requested);
  r.summary.bytes_before = device_tensors_before;
  const TrainConfig& c = r.c;
  // Rank 0 alone prints, logs and writes checkpoints and TensorBoard files.
  const QuietUnlessRankZero quiet(r.rank, out);
  out = quiet.out();
  Reporter reporter(out, c.report.progress && r.rank == 0, r.rank == 0 ? c.report.log : std::string(),
                    (c.report.keep_records || !c.report.html.empty()) && r.rank == 0 ? &r.summary.records : nullptr);
  const AnomalyMode anomaly(c.debug.detect_anomaly);
  const RunThreads threads(r);
  if (!c.report.tensorboard.empty() && r.rank == 0) {
    r.tensorboard = std::make_unique<TensorBoardWriter>(c.report.tensorboard);
  }
  print_run_banner(r, out);

  allocator_for(r.device).reset_peak();
  reset_memory_ledger_peak(r.device);
  r.summary.training_samples = r.splits.train.size();
  r.summary.dataset_bytes = dataset_bytes(r);
  const CpuMemoryCap cap(
      r.device.is_cpu() && c.memory.budget > 0 ? cpu_bytes_before + r.summary.dataset_bytes + c.memory.budget : 0);
  Throughput throughput;
  restart_step_clock(r);
  bool stop = false;
  // A run that stops on a NaN loss or an anomaly still gets its page.
  const ReportOnError report_on_error(r, reporter);
  for (int64_t epoch = r.pos.epoch; epoch < c.epochs && !stop; ++epoch) {
    stop = train_epoch(r, epoch, reporter, throughput);
    report_steps(r, r.metrics->flush(), reporter, throughput);  // a NaN loss stops here, before any checkpoint
    reporter.end_progress();
    if (!stop) {
      r.pos.epoch = epoch + 1;
      r.pos.sample_in_epoch = 0;
    }
    evaluate_and_report(r, fmt::format("epoch {}", epoch + 1), reporter, throughput);
    save_epoch_checkpoint(r, throughput);
  }
  r.summary.seconds = throughput.wall_seconds();
  r.summary.samples_per_second = throughput.samples_per_second();
  r.summary.tokens_per_second = r.summary.samples_per_second * static_cast<double>(r.tokens_per_sample);
  write_summary(r, out, reporter);
  if (r.tensorboard) r.tensorboard->flush();
  if (!c.report.html.empty() && r.rank == 0) write_run_report(r);
  return r.summary;
}

}  // namespace mt::tools
