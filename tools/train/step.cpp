// The training step: start here.
//
// One optimizer step of `mixtape train`, in the order of PyTorch's AMP
// recipe (and of llm.c's training loop), reading this file top to bottom:
//
//   for each of the --grad-accum micro-batches             train_epoch
//     upload the batch (asynchronous, BatchStager)
//     forward under autocast (fp8: FP8 Linears); f32 loss   forward_backward
//     scaler.scale(loss / grad_accum).backward()
//   delayed FP8 scaling: next step's scales from the amax   device_step
//   ZeRO-1: reduce-scatter the gradients (FSDP did, during backward)
//   scaler.unscale_(opt); clip_grad_norm_      (--clip)
//   scaler.step(opt): the update, skipped on the device when found_inf
//   BatchNorm's staged running statistics committed unless found_inf
//   scaler.update(): back off or grow the loss scale
//   scheduler.step_unless(found_inf); zero_grad
//   queue the read-back of loss, grad norm, skip, scale     finish_step
//
// --cuda-graph runs the same forward_backward and device_step, captured
// once and replayed (stage_micro_batch, graphed_step).
//
// Nothing here has the host read a device value: scalars reach kernels by
// value, the skip decision and the schedule stay on the device, and the
// step's numbers come back asynchronously (StepMetrics) to be reported a few
// steps later (metrics.cpp). Tests count 0 blocking operations per step.
#include "tools/train/step.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/dtype_report.h"
#include "autograd/grad_mode.h"
#include "core/host_sync.h"
#include "distributed/fp8.h"
#include "nn/layers.h"
#include "tools/train/run.h"

namespace mt::tools {

// The training loss: cross-entropy of the logits against the targets, over
// every position for a language model ([B, T, V] logits, [B, T] targets).
Tensor task_loss(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  if (targets.dim() == 1) return cross_entropy(logits, targets, options);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), options);
}

namespace {

void keep_dtype_report(TrainingRun& r, const std::vector<autograd::DtypeReportRow>& rows);  // --dtype-report, below

// ---------------------------------------------------------------- the step

// Forward and backward of one micro-batch already on the device; the loss stays there.
void forward_backward(TrainingRun& r, const Tensor& inputs, const Tensor& targets) {
  nn::Module& model = r.ddp ? static_cast<nn::Module&>(*r.ddp) : r.fsdp ? static_cast<nn::Module&>(*r.fsdp) : *r.model;
  Tensor loss;
  {
    // --dtype-report: the dtypes of the first forward (every later one repeats them).
    std::optional<autograd::DtypeRecorder> recorder;
    if (r.c.debug.dtype_report && !r.dtype_report_done) recorder.emplace();
    amp::Autocast guard(r.device, low_precision_dtype(r.precision), r.precision != Precision::Fp32);
    std::optional<amp::Fp8Autocast> fp8;  // --precision fp8: the eligible Linears' GEMMs in FP8
    if (r.fp8) fp8.emplace(*r.fp8);
    loss = model.forward_loss(inputs, targets);  // defined where the model fuses its head and loss
    if (!loss.defined()) loss = task_loss(model.forward(inputs), targets);
    if (recorder) keep_dtype_report(r, recorder->rows());
  }
  const int64_t accum = r.c.optim.grad_accum;
  const Tensor micro_loss = accum > 1 ? div(loss, static_cast<double>(accum)) : loss;
  {
    // Gradient accumulation: the ranks average once, on the last micro-batch.
    std::optional<dist::DistributedDataParallel::NoSync> local;
    if (r.ddp && r.micro + 1 < accum) local.emplace(*r.ddp);
    r.scaler->scale(micro_loss).backward();
  }
  NoGradGuard no_grad;
  r.accumulated_loss =
      r.accumulated_loss.defined() ? add(r.accumulated_loss, micro_loss.detach()) : micro_loss.detach();
}

// MT_TEST_NONFINITE_GRADIENT=rank:step: on that rank at that step, an inf in
// the first gradient the optimizer will read (ZeRO-1: this rank's shard only).
void inject_nonfinite_gradient(TrainingRun& r) {
  if (r.rank != r.inject_rank || r.pos.step + 1 != r.inject_step) return;
  for (const Tensor& p : r.opt->parameters()) {
    if (!p.grad().defined()) continue;
    fill_(p.grad().view({-1}).narrow(0, 0, 1), INFINITY);
    return;
  }
}

// Unscale, clip, step, update: every decision (skip, schedule) on the device,
// so the whole of it can be captured in a CUDA graph.
StepTensors device_step(TrainingRun& r) {
  if (r.fp8) {  // delayed FP8 scaling: next step's scales from the amax over all ranks, on the device
    if (r.world > 1) dist::reduce_fp8_amaxes(*r.fp8, dist::group_for(r.device));
    r.fp8->update();
  }
  if (r.zero) r.zero->reduce_gradients();  // ZeRO-1: this rank's shard of the mean gradient
  inject_nonfinite_gradient(r);            // tests only (MT_TEST_NONFINITE_GRADIENT)
  Tensor grad_norm;
  const double clip = r.c.optim.clip;
  if (clip > 0) {
    r.scaler->unscale_(*r.opt);  // clip the true gradients, not the scaled ones
    grad_norm = r.zero   ? r.zero->clip_grad_norm_(clip)
                : r.fsdp ? r.fsdp->clip_grad_norm_(clip)
                         : optim::clip_grad_norm_(r.model->parameters(), clip);
  } else if (r.c.report.record_grad_norm && !r.zero && !r.fsdp) {
    // Measured only: the scaled gradients' norm over the scale, nothing unscaled in place.
    grad_norm = optim::grad_norm(r.model->parameters(), r.scaler->is_enabled() ? r.scaler->scale_tensor() : Tensor());
  }
  const amp::StepOutcome outcome = r.scaler->step(*r.opt);
  // fp16: a batch that overflowed must not leave inf in BatchNorm's running statistics.
  nn::commit_batch_norm_statistics_unless(*r.model, outcome.found_inf());
  Tensor nonfinite;
  if (r.c.debug.explain_skips > 0 && r.scaler->is_enabled()) nonfinite = r.scaler->nonfinite_gradients(*r.opt).flags;
  r.scaler->update();
  r.scheduler->step_unless(outcome.found_inf());  // a skipped step must not advance the schedule
  if (r.zero) {
    r.zero->gather_parameters();
    r.zero->zero_grad();
  } else if (r.fsdp) {
    r.fsdp->step_done();  // ZeRO-2 gathers the updated parameters, ZeRO-3 at the next forward
    r.fsdp->zero_grad();
  } else {
    r.opt->zero_grad();
  }
  Tensor loss = std::exchange(r.accumulated_loss, Tensor());
  if (r.world > 1) {  // the mean over the ranks' batches: what one process at the whole batch reports
    loss = loss.contiguous().clone();
    dist::group_for(r.device).all_reduce(loss)->wait();
    loss = div(loss, static_cast<double>(r.world));
  }
  return {loss, grad_norm, outcome.found_inf(), nonfinite};
}

// The host's part of a step: its position, and the asynchronous read-back of its values.
void finish_step(TrainingRun& r, const StepTensors& step, const data::Batch& last_batch, int64_t epoch) {
  ++r.pos.step;
  r.pos.epoch = epoch;
  r.pos.sample_in_epoch = r.loader->samples_through(last_batch.index);
  r.metrics->stage({.step = r.pos.step, .epoch = epoch, .batch = last_batch.index}, step.loss, step.grad_norm,
                   step.found_inf, r.scaler->is_enabled() ? r.scaler->scale_tensor() : Tensor(),
                   r.scheduler->device_factor(), step.nonfinite);
}

// ---------------------------------------------------------------- --cuda-graph: the step captured, replayed

void stage_micro_batch(TrainingRun& r, GraphedStep& g, const data::Batch& batch) {
  const BatchStager::OnDevice on_device = r.stager->upload(batch);
  const auto m = static_cast<size_t>(r.micro);
  auto full_batch = [&](const Tensor& t) {
    Shape shape = t.sizes();
    shape[0] = r.c.batch;
    const MemoryCategoryScope data_memory(MemoryCategory::Data);
    return empty(shape, t.dtype(), r.device);
  };
  if (g.inputs.size() <= m) {
    g.inputs.push_back(full_batch(on_device.inputs));
    g.targets.push_back(full_batch(on_device.targets));
    g.sizes.push_back(0);
  }
  const int64_t n = on_device.targets.size(0);
  copy_(g.inputs[m].narrow(0, 0, n), on_device.inputs);
  copy_(g.targets[m].narrow(0, 0, n), on_device.targets);
  g.sizes[m] = n;
}

StepTensors graphed_step(TrainingRun& r, GraphedStep& g) {
  const bool full = std::all_of(g.sizes.begin(), g.sizes.end(), [&](int64_t n) { return n == r.c.batch; });
  if (full && g.graph->captured()) {
    g.graph->replay();
    return g.outputs;
  }
  auto step = [&] {
    for (size_t m = 0; m < g.sizes.size(); ++m) {
      forward_backward(r, g.inputs[m].narrow(0, 0, g.sizes[m]), g.targets[m].narrow(0, 0, g.sizes[m]));
    }
    return device_step(r);
  };
  if (!full || r.steps_this_run == 0) return step();
  g.graph->capture([&] { g.outputs = step(); });
  g.graph->replay();
  return g.outputs;
}

// ---------------------------------------------------------------- the loop: micro-batches, then the step

// One micro-batch's forward and backward, or under --cuda-graph its copy
// into the graph's static buffers (the graphed step runs them all).
void run_micro_batch(TrainingRun& r, const data::Batch& batch) {
  if (r.graphed) {
    stage_micro_batch(r, *r.graphed, batch);
    return;
  }
  const BatchStager::OnDevice on_device = r.stager->upload(batch);
  forward_backward(r, on_device.inputs, on_device.targets);
}

// The step's wall time (evaluation and checkpoints left out), and the thread tuner's.
void time_step(TrainingRun& r) {
  const Clock::time_point now = Clock::now();
  r.summary.step_seconds.push_back(std::chrono::duration<double>(now - r.last_step_end).count());
  r.last_step_end = now;
  if (r.tuner) r.tuner->step_finished();
}

}  // namespace

bool train_epoch(TrainingRun& r, int64_t epoch, Reporter& reporter, Throughput& throughput) {
  r.loader->start_epoch_at_sample(epoch, epoch == r.pos.epoch ? r.pos.sample_in_epoch : 0);
  // With a loss scaler a step can be skipped; BatchNorm then stages its
  // running-statistics update and device_step commits it unless skipped.
  nn::stage_batch_norm_statistics(*r.model, r.scaler->is_enabled());
  r.micro = 0;
  r.accumulated_loss = Tensor();
  // Micro-batches that cannot fill a whole step at the epoch's end are left
  // out, so their gradients never leak into the next epoch's first step.
  const int64_t accum = r.c.optim.grad_accum, first = r.loader->first_batch();
  const int64_t batches_used = first + (r.loader->end_batch() - first) / accum * accum;
  while (auto batch = r.loader->next()) {
    if (batch->index >= batches_used) break;
    const int64_t syncs_before = host_sync_count();
    if (r.micro == 0) prepare_fp8_shadow(r);  // --fp8-shadow N: every Nth step runs the BF16 twins too
    run_micro_batch(r, *batch);
    throughput.add_samples(batch->targets.size(0) * r.world);  // every rank trains a batch of this size
    if (++r.micro < r.c.optim.grad_accum) {
      if (r.steps_this_run > 0) r.steady_syncs += host_sync_count() - syncs_before;
      continue;
    }
    r.micro = 0;
    finish_step(r, r.graphed ? graphed_step(r, *r.graphed) : device_step(r), *batch, epoch);
    throughput.step_done();
    time_step(r);
    report_steps(r, r.metrics->poll(), reporter, throughput);
    report_fp8_statistics(r, reporter);  // --fp8-stats N: a host read every N steps
    report_fp8_shadow(r, reporter);      // --fp8-shadow N: the same
    if (++r.steps_this_run > 1) {        // the first step carries one-time set-up
      r.steady_syncs += host_sync_count() - syncs_before;
      ++r.steady_steps;
    }
    if (r.c.max_steps > 0 && r.pos.step >= r.c.max_steps) return true;
    const bool epoch_ends = batch->index + 1 == batches_used;  // evaluated at the epoch's end anyway
    if (r.c.report.eval_every > 0 && r.pos.step % r.c.report.eval_every == 0 && !epoch_ends) {
      report_steps(r, r.metrics->flush(), reporter, throughput);  // a NaN loss stops before an evaluation
      reporter.end_progress();
      evaluate_and_report(r, fmt::format("step {}", r.pos.step), reporter, throughput);
    }
  }
  return false;
}

// ---------------------------------------------------------------- the --dtype-report aid

namespace {

// --dtype-report: the first forward's rows, kept for the log and the report and printed.
void keep_dtype_report(TrainingRun& r, const std::vector<autograd::DtypeReportRow>& rows) {
  r.dtype_report_done = true;
  nlohmann::json table = nlohmann::json::array();
  for (const autograd::DtypeReportRow& row : rows) {
    table.push_back({{"module", row.module},
                     {"op", row.op},
                     {"policy", row.policy},
                     {"inputs", row.inputs},
                     {"compute", row.compute},
                     {"output", row.output},
                     {"calls", row.calls},
                     {"flag", row.flag},
                     {"fp8", row.fp8}});
  }
  r.summary.dtype_report = table;
}

}  // namespace

}  // namespace mt::tools
