// Training checkpoints: what train() saves with --save and restores with
// --resume (safetensors: the model, the optimizer's and the scaler's state
// under "optimizer." and "scaler.", the position and configuration in the
// metadata), and the model and configuration `mixtape eval` and `generate`
// read back from one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "amp/fp8_recipe.h"
#include "amp/grad_scaler.h"
#include "amp/int8_quantize.h"
#include "core/safetensors.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "tools/train/config.h"

namespace mt::tools {

// Where a run stood when it saved.
struct CheckpointPosition {
  int64_t epoch = 0;  // epoch in progress
  // Samples of the epoch's order trained on, by all ranks together: a run
  // of any world size continues there (DataLoader::start_epoch_at_sample).
  int64_t sample_in_epoch = 0;
  int64_t step = 0;         // optimizer steps done
  int64_t saved_world = 1;  // ranks of the run that saved it (read back only)
};

// The model's state, `optimizer_state` (an unsharded optimizer's
// state_dict: ZeRO's consolidated one), the scaler's and the schedule's
// state, delayed FP8 scaling's amax histories and scales (under "fp8."; fp8
// may be null), the position, the RNG and the run's configuration, written
// atomically to `path` (safetensors).
void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::StateDict& optimizer_state, const amp::GradScaler& scaler,
                     const optim::LrScheduler& sched, const CheckpointPosition& pos, const amp::Fp8State* fp8);

// Restores a checkpoint into a run of configuration `c` whose epochs have
// `samples` samples, refusing (mt::Error naming the file and the field)
// anything that does not fit: another model, another dtype, non-finite
// weights or optimizer state, negative second moments, metadata that is not
// a whole number in range (a step above 2^53), hostile FP8 state
// (amp::Fp8State::load_state_dict). Any world size resumes it: the model
// and the optimizer's state are whole, and the position counts samples. The file is another person's
// until it has been checked: the fuzzer (tests/fuzz) feeds it garbage. A
// run that is not --precision fp8 ignores the FP8 state.
using LoadOptimizerState = std::function<void(const optim::StateDict&)>;
CheckpointPosition load_checkpoint(const std::string& path, const TrainConfig& c, int64_t samples, nn::Module& model,
                                   const LoadOptimizerState& load_optimizer, amp::GradScaler& scaler,
                                   optim::LrScheduler& sched, amp::Fp8State* fp8);

// --save-sharded (under --shard grads|params): nothing is gathered, no rank
// ever holds the whole model. Each rank writes its own file,
// sharded_checkpoint_file(path, rank, world): its f32 shards of the
// parameters ("master"), its shard optimizer's state ("optimizer."), its
// model buffers ("buffers.": its norm statistics) and the layout (the
// units' shard sizes); after a barrier rank 0 writes `path`, the index: the
// scaler's state, the position and configuration, the world size and the
// layout. It resumes with the same world size and a --shard run of the same
// layout, each rank reading its own file; every file is checked against the
// index (the same step and layout) and its values finite. Eval and generate
// refuse it, saying how to get a consolidated one.
struct LocalShards {
  Tensor master;               // f32: this rank's shards of every unit
  optim::StateDict optimizer;  // the shard optimizer's own state_dict
  std::string layout;          // the units' shard sizes, "a,b,c"
};
std::string sharded_checkpoint_file(const std::string& path, int rank, int world);
void save_sharded_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                             const LocalShards& mine, const amp::GradScaler& scaler, const optim::LrScheduler& sched,
                             const CheckpointPosition& pos, int rank, int world);
bool is_sharded_checkpoint(const SafetensorsFile& f);
using LoadLocalShards = std::function<void(const LocalShards&)>;
CheckpointPosition load_sharded_checkpoint(const std::string& path, const TrainConfig& c, int64_t samples,
                                           nn::Module& model, const std::string& layout, const LoadLocalShards& load,
                                           amp::GradScaler& scaler, optim::LrScheduler& sched, int rank, int world);

// Whether a checkpoint whose weights hold NaN or inf is loaded: refused
// (mt::Error naming the tensor) unless asked for, for a post-mortem
// (`eval` and `generate --allow-nonfinite`).
enum class NonFiniteWeights { Refuse, Allow };

// The model of a checkpoint written by train() (the model named in its
// metadata), on `device`. Its tensors must be stored in the dtype the model
// keeps them in -- f32, or under --master-weights the run's f16/bf16 with norm
// layers in f32 -- and are refused otherwise, naming the tensor, the dtype
// expected and the one found: never cast (the rule --resume follows too).
std::shared_ptr<nn::Module> load_model_checkpoint(const SafetensorsFile& checkpoint, const std::string& path,
                                                  Device device, NonFiniteWeights nonfinite = NonFiniteWeights::Refuse);

// The batch norms an INT8 checkpoint's recipe (its "int8" metadata, parsed)
// says were folded into their convolutions; none when it names none. A
// malformed list is an mt::Error naming `path`.
std::vector<amp::int8::FoldedBatchNorm> folded_batch_norms(const nlohmann::json& int8, const std::string& path);
// The INT8 handoffs (u8 from layer to layer) a checkpoint's "int8" metadata
// lists; none when it lists none. A malformed entry is an mt::Error naming path.
std::vector<amp::int8::Int8Handoff> int8_handoffs(const nlohmann::json& int8, const std::string& path);

// The run configuration a checkpoint's metadata records (the model,
// precision, dataset and context; older checkpoints: the defaults), its
// types checked.
TrainConfig checkpoint_config(const SafetensorsFile& checkpoint, const std::string& path);

// The optimizer steps a checkpoint had done (its "step" metadata, a whole
// number in 0..2^53, checked like every other).
int64_t checkpoint_step(const SafetensorsFile& checkpoint, const std::string& path);

}  // namespace mt::tools
