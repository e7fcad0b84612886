// What one `mixtape train` run is asked to do (TrainConfig), and the
// choices made from it before anything trains: the precision, the device,
// the "auto" defaults, the datasets it reads, and the JSON it is logged and
// checkpointed as.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "amp/fp8_recipe.h"
#include "core/tensor.h"
#include "optim/optimizer.h"
#include "tools/data/dataset.h"

namespace mt::tools {

// ---------------------------------------------------------------- the typed choices
// Each is parsed once, at the CLI's edge (tools/cli), and printed back by its
// name function where a log, a checkpoint or a command line needs the text.

// Fp8: BF16 autocast with each eligible Linear's GEMMs in FP8 (amp/fp8_recipe.h).
enum class Precision { Fp32, Fp16, Bf16, Fp8 };
// "fp32", "fp16", "bf16", "fp8"; anything else is an mt::Error listing them.
Precision parse_precision(const std::string& text);
std::string precision_name(Precision p);
// --precision: "auto" (none: bf16 on a CPU, fp16 on a GPU) or a precision.
std::optional<Precision> parse_precision_choice(const std::string& text);
std::string precision_choice_name(std::optional<Precision> p);

enum class OptimizerKind { AdamW, Sgd };
OptimizerKind parse_optimizer(const std::string& text);  // "adamw" | "sgd"
std::string optimizer_name(OptimizerKind kind);

// --shard: what fully sharded data parallel splits over the ranks besides
// the optimizer state (dist::FullyShardedDataParallel).
enum class ShardLevel { None, Grads, Params };          // none, ZeRO-2, ZeRO-3
ShardLevel parse_shard_level(const std::string& text);  // "none" | "grads" | "params"
std::string shard_level_name(ShardLevel level);
// --param-dtype / --reduce-dtype: "f32" | "bf16" | "f16".
DType parse_float_dtype(const std::string& text);

enum class ScheduleKind { Cosine, Constant, Step };
ScheduleKind parse_schedule(const std::string& text);  // "cosine" | "constant" | "step"
std::string schedule_name(ScheduleKind kind);

// --device: auto (a GPU when there is one, else the CPU) or one device.
struct DeviceChoice {
  std::optional<Device> device;  // none: auto
  // "cuda:N" rather than "cuda": with mpirun every rank uses GPU N, where
  // otherwise each takes its own by its rank on the machine.
  bool index_named = false;

  DeviceChoice() = default;
  DeviceChoice(Device d)  // NOLINT: implicit, so `c.device = kCPU` reads as it should
      : device(d), index_named(d.is_cuda() && d.index != 0) {}
  bool is_auto() const { return !device.has_value(); }
};
// "auto" or parse_device's spellings (cpu, cuda, cuda:N, sim), with its errors.
DeviceChoice parse_device_choice(const std::string& text);
// Back as written: "auto", "cpu", "cuda", "cuda:N", "sim".
std::string device_choice_name(const DeviceChoice& d);

// ---------------------------------------------------------------- TrainConfig, in parts

// What is read and how much of it.
struct DataOptions {
  std::string dataset = "auto";     // auto (the model's task: tools/data/registry.h's default_dataset) or a
                                    // registry name
  std::string dir;                  // --data: the dataset's directory, overriding the default
  int64_t context = 0;              // text models: tokens per window or passage (0 = the model's context)
  std::string tokenizer = "bytes";  // the brown dataset's tokens: bytes or gpt2 (tools/data/bpe.h)
  bool augment = false;
  int64_t train_limit = 0;  // use only the first N training samples (windows for text; tests, quick runs)
  int64_t test_limit = 0;
  // Build the next batch on a background thread while the step runs. Off,
  // the memory peak no longer depends on when that thread ran (mixtape bench).
  bool prefetch = true;
};

// The optimizer, its schedule and the step's gradient handling.
struct OptimOptions {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 1e-3;
  double weight_decay = 0.01;  // not applied to biases and norm parameters
  double momentum = 0.9;       // sgd
  ScheduleKind schedule = ScheduleKind::Cosine;
  int64_t warmup = 0;  // linear LR warmup steps
  int64_t grad_accum = 1;
  double clip = 0;       // max gradient norm (0 = off)
  bool offload = false;  // --offload-optimizer: master weights and optimizer state in host memory (optim/optimizer.h)
  // --optimizer-state: how the moments are stored (embeddings keep f32 state)
  optim::StateDtype state = optim::StateDtype::F32;
  int64_t state_block = 2048;  // --optimizer-state-block: int8 values per absmax
};

// --precision fp8: the recipe and which Linears stay in BF16.
struct Fp8Options {
  amp::Fp8RecipeKind recipe = amp::Fp8RecipeKind::Current;  // torchao's default: tensorwise, this step's amax
  int64_t history = 1024;  // delayed: amax history length (Transformer Engine's default; 16-32 adapt faster)
  int64_t margin = 0;      // scale = max / amax * 2^-margin
  // Linears kept in BF16: "first", "last" (in the model's registration
  // order), "head" (a Linear named classifier, head or lm_head); "none" for none.
  std::vector<std::string> keep_bf16 = {"first", "last", "head"};
  int64_t stats_every = 0;   // --fp8-stats N: where FP8 hurts, logged every N steps (0 = off)
  int64_t shadow_every = 0;  // --fp8-shadow N: each FP8 Linear against its BF16 twin, every N steps (0 = off)
};

// Mixed precision.
struct PrecisionOptions {
  std::optional<Precision> mode;  // none: auto (bf16 on a CPU, fp16 on a GPU: autocast's default dtypes)
  bool master_weights = false;    // f16/bf16 parameters with f32 masters in the optimizer
  double init_scale = 65536;      // fp16: the GradScaler's first loss scale (PyTorch's init_scale)
  Fp8Options fp8;
};

// Data parallel training (mpirun -np N) and the CPU's threads.
struct ParallelOptions {
  // Train through DistributedDataParallel even in a world of one (mpirun
  // -np N > 1 always does): with MT_DIST_BACKEND=nccl, checks the data
  // parallel path, NCCL included, on a machine with one GPU.
  bool ddp = false;
  // ZeRO stage 1 (dist::ShardedOptimizer): each rank keeps 1/N of the
  // optimizer state and master weights; gradients are reduce-scattered and
  // the parameters all-gathered at each step.
  bool shard_optimizer = false;
  // Fully sharded data parallel: --shard grads is ZeRO-2 (gradients and
  // optimizer state split, parameters whole), --shard params ZeRO-3 (the
  // parameters too, all-gathered per block or stage when needed). The
  // gathered parameters compute in param_dtype (unset: the model's own),
  // the gradients are reduce-scattered in reduce_dtype.
  ShardLevel shard = ShardLevel::None;
  std::optional<DType> param_dtype;
  DType reduce_dtype = kF32;
  // With N ranks, an epoch whose samples do not divide by N: leave out the
  // tail (true) or pad the last shards by wrapping around (false, PyTorch's
  // DistributedSampler default).
  bool drop_uneven = false;
  // --sync-bn: every BatchNorm2d normalises with the statistics of all ranks'
  // samples (dist::convert_sync_batchnorm), as one process at the whole batch would.
  bool sync_bn = false;
  // CPU threads for the kernels. 0 = auto: on the CPU device a ThreadTuner
  // (core/threads.h) times steps with each count up to mt::default_num_threads()
  // and keeps the fastest, trying again every few seconds. Results are the
  // same for every count.
  int64_t threads = 0;
};

// Spending less memory.
struct MemoryOptions {
  bool checkpoint_activations = false;  // recompute each block or stage in backward (mt::checkpoint)
  // CPU only, 0 = none: the run's tensors other than its dataset may hold at
  // most this many bytes once the data is loaded; an allocation beyond throws
  // OutOfMemoryError as a full GPU would (mixtape bench's batch search).
  int64_t budget = 0;
};

// Checkpoint files.
struct CheckpointOptions {
  std::string save;    // written at each epoch's end and when stopping
  std::string resume;  // continue from this one
  // --save-sharded (with --shard): one file per rank beside an index at
  // `save`, nothing gathered (tools/train/checkpoint.h).
  bool sharded = false;
};

// Seeing a run: logs, evaluation, the live line, the report (tools/train/report.h).
struct ReportOptions {
  std::string log;                // metrics as JSON lines
  std::string tensorboard;        // a folder for TensorBoard event files (tools/train/tensorboard.h)
  std::string html;               // --report: write the HTML report of this run here at its end
  int64_t eval_every = 0;         // also evaluate every N optimizer steps (0 = at each epoch's end only)
  bool progress = true;           // the live progress line on stderr
  bool memory = false;            // --memory: print the memory ledger at the training peak beside its theory
  bool keep_records = false;      // keep every logged record in TrainSummary::records (on with --report)
  bool record_grad_norm = false;  // measure the gradient norm every step even without --clip (on with --report)
  std::string command;            // the command line that started the run, for the log and the report
};

// The mixed-precision debugging aids.
struct DebugOptions {
  bool detect_anomaly = false;  // stop at the first NaN/inf an op produces, naming it (mt::AnomalyMode)
  bool dtype_report = false;    // list the dtype autocast chose per module and op (first step)
  int64_t explain_skips = 0;    // name the parameters with inf/NaN gradients at the 1st and every Nth skip (0 = off)
};

struct TrainConfig {
  // The embedded default (`mixtape train` with no flags, what `make train`
  // runs): mixed precision on whatever device there is — mlp in bf16 on a
  // CPU, cnn in fp16 on a GPU — for 3 epochs.
  std::string model = "auto";  // auto (models::default_model) or a name from models/registry.h
  DeviceChoice device;         // auto
  int64_t epochs = 3;
  int64_t max_steps = 0;  // stop after this many optimizer steps (0 = no limit)
  int64_t batch = 128;
  uint64_t seed = 0;
  bool cuda_graph = false;  // capture the whole step once and replay it (core/graph.h)

  DataOptions data;
  OptimOptions optim;
  PrecisionOptions precision;
  ParallelOptions parallel;
  MemoryOptions memory;
  CheckpointOptions checkpoint;
  ReportOptions report;
  DebugOptions debug;
};

// The dtype autocast computes in under a mixed precision (bf16, else f16).
DType low_precision_dtype(Precision p);

// The device a choice names, checked usable (auto: a GPU when there is one, else the CPU).
Device resolve_device(const DeviceChoice& choice);
Device resolve_device(const std::string& text);

// mt::Error naming `what` unless the folder a file `path` would be written in exists.
void check_output_folder(const std::string& what, const std::string& path);

// Resolves the "auto" choices (model, precision, dataset) against the device the run will use.
// `model` with "auto" resolved for the device (models::default_model).
std::string resolve_model(const std::string& model, Device device);
TrainConfig resolve_defaults(const TrainConfig& requested, Device device);

// The configuration as the metrics log, the summary and checkpoints record it.
nlohmann::json config_json(const TrainConfig& c);

// The training and held-out splits `mixtape train` with this configuration
// would read, on the CPU, with out-of-range labels kept (`mixtape check-data`).
std::pair<data::TensorDataset, data::TensorDataset> load_training_data(const TrainConfig& c);

}  // namespace mt::tools
