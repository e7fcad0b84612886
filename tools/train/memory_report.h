// The memory ledger of a training run beside what theory predicts for its
// configuration (`mixtape train --memory`, and `memory_ledger` in --log).
//
// Theory, per parameter of n elements stored in s bytes each:
//   parameters       n * s                  (buffers likewise)
//   gradients        n * s                  (.grad has the parameter's dtype)
//   master weights   4n when f16/bf16 parameters have f32 masters, else 0
//   optimizer state  k * n * 4 + 4, k = 2 for AdamW (m, v), 1 for SGD with
//                    momentum: state is f32 whenever the parameter or its
//                    master is, else in s bytes; + 4 bytes of step count.
// So FP32 AdamW is 4 + 4 + 4 + 4 bytes per parameter, and f16 parameters
// with f32 masters 2 + 2 + 4 + 4 + 4. FP8 training's saved inputs, weight
// casts and delayed-scaling state follow amp::Fp8State::memory_theory (the
// saved inputs have none when activation checkpointing recomputes them).
// Activations, the autocast cache, workspace and data have no closed form
// here: the ledger measures them.
#pragma once

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/memory_ledger.h"
#include "distributed/fsdp.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mt::tools {

struct MemoryTheory {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t master_weights = 0;
  int64_t optimizer_state = 0;
  // FP8 training's (-1: no theory, the run is not FP8 or recomputes them).
  int64_t fp8_activations = -1;
  int64_t fp8_weight_casts = -1;
  int64_t fp8_state = -1;
};

// Every category, in the enum's order.
std::array<MemoryCategory, kMemoryCategories> all_memory_categories();

// Data parallel over `world` ranks (either way also in a world of one):
//  * ddp: DDP's f32 buckets add to the gradients, and the f32 parameters'
//    gradients are views of them (gradient_as_bucket_view, as mixtape train
//    has it);
//  * shard_optimizer: ZeRO-1's f32 flat buffer and shard add to the
//    gradients, and each rank keeps its parts' master weights and state
//    (`shards`: this rank's layout; without it, 1/world of each parameter).
// (Fully sharded data parallel has a theory of its own: fsdp_memory_theory.)
struct DataParallelLayout {
  int world = 1;
  bool ddp = false;
  bool shard_optimizer = false;
  const dist::ShardLayout* shards = nullptr;
};

// What the optimizer keeps per parameter (optim::PrecisionOptions' state options).
struct OptimizerStateTheory {
  int tensors = 2;  // per-element state tensors: 2 AdamW, 1 SGD with momentum, 0 plain SGD
  optim::StateDtype dtype = optim::StateDtype::F32;
  int64_t block = 2048;                // int8: values per f32 absmax
  int64_t min_quantized_numel = 4096;  // int8: smaller tensors keep f32 state
  std::vector<Tensor> kept_f32;        // parameters whose state stays f32 (the embeddings)
};

MemoryTheory memory_theory(const nn::Module& model, bool master_weights, const OptimizerStateTheory& state,
                           DataParallelLayout layout = {});

// Fully sharded data parallel, per rank: its f32 shards of every unit
// (parameters), their f32 gradients, and the optimizer state over its
// parts, all about 1/N; the buffers whole; and what is whole only for a
// while, at most: the root unit and two more gathered, and in a 16-bit
// param_dtype two cast copies of this rank's shard of a unit being sent
// (parameters), the
// reduce-scatter buffers of the root and two more, which backward writes
// the gradients into (gradients; and one unit's full gradients besides
// when the parameters compute in another dtype, and reduced shards when
// accumulating). ZeRO-2 keeps every unit gathered.
// `accumulates`: more than one backward per step (--grad-accum).
MemoryTheory fsdp_memory_theory(const dist::FullyShardedDataParallel& fsdp, const OptimizerStateTheory& state,
                                bool accumulates);

// The theory's figure for `category`, or -1 where it has none.
int64_t theory_bytes(const MemoryTheory& theory, MemoryCategory category);

// A table: each category at the total's peak, its own peak, and the theory
// (a category with no bytes and no theory is left out).
void print_memory_report(std::FILE* out, const MemoryLedger& ledger, const MemoryTheory& theory,
                         const std::string& device);

// {"total_peak", "reserved_unused", "at_peak": {...}, "peak": {...}, "theory": {...}} in bytes.
nlohmann::json memory_report_json(const MemoryLedger& ledger, const MemoryTheory& theory);

}  // namespace mt::tools
