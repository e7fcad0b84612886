// The training step (step.cpp): what one optimizer step of train() runs,
// and the --cuda-graph buffers it replays from. Read step.cpp top to bottom
// for the whole step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "core/graph.h"
#include "core/tensor.h"

namespace mt::tools {

struct TrainingRun;  // tools/train/run.h
struct Reporter;     // tools/train/metrics.h
class Throughput;

// What a step leaves on the device for its metrics.
struct StepTensors {
  Tensor loss, grad_norm, found_inf;
  Tensor nonfinite;  // --explain-skips: f32 [parameters], 1 where a gradient held inf/NaN
};

// --cuda-graph: each micro-batch is copied into a static input buffer; the
// step over them is captured once (after an eager warm-up step that creates
// the optimizer's state) and replayed from then on. A step with a short
// batch (an epoch's last) runs eagerly from the same buffers.
struct GraphedStep {
  std::unique_ptr<CudaGraph> graph;
  std::vector<Tensor> inputs, targets;  // one full-batch buffer per micro-batch
  std::vector<int64_t> sizes;           // the samples staged in each
  StepTensors outputs;                  // what the captured step writes
};

// The training loss: cross-entropy of the logits against the targets, over
// every position for a language model ([B, T, V] logits, [B, T] targets).
Tensor task_loss(const Tensor& logits, const Tensor& targets,
                 const CrossEntropyOptions& options = CrossEntropyOptions{});

// Trains until the epoch ends or the step limit is reached; true at the limit.
bool train_epoch(TrainingRun& r, int64_t epoch, Reporter& reporter, Throughput& throughput);

}  // namespace mt::tools
