// What one `mixtape train` run is asked to do (TrainConfig), and the
// choices made from it before anything trains: the precision, the device,
// the "auto" defaults, the datasets it reads, and the JSON it is logged and
// checkpointed as.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "tools/data/dataset.h"

namespace mt::tools {

enum class Precision { Fp32, Fp16, Bf16 };
Precision parse_precision(const std::string& text);
std::string precision_name(Precision p);

struct TrainConfig {
  // The embedded default (`mixtape train` with no flags, what `make train`
  // runs): mixed precision on whatever device there is — mlp in bf16 on a
  // CPU, cnn in fp16 on a GPU — for 3 epochs.
  std::string model = "auto";      // auto | mlp | cnn | resnet | gpt-* | bert-* (models/registry.h)
  std::string precision = "auto";  // auto | fp32 | fp16 | bf16
  bool master_weights = false;     // f16/bf16 parameters with f32 masters in the optimizer
  std::string device = "auto";     // auto | cpu | cuda | sim
  int64_t epochs = 3;
  int64_t max_steps = 0;  // stop after this many optimizer steps (0 = no limit)
  int64_t batch = 128;
  double lr = 1e-3;
  std::string optimizer = "adamw";  // adamw | sgd
  double weight_decay = 0.01;       // not applied to biases and norm parameters
  double momentum = 0.9;            // sgd
  std::string schedule = "cosine";  // cosine | constant | step
  int64_t warmup = 0;
  int64_t grad_accum = 1;
  bool cuda_graph = false;    // capture the whole step once and replay it (core/graph.h)
  double clip = 0;            // max gradient norm (0 = off)
  double init_scale = 65536;  // fp16: the GradScaler's first loss scale (PyTorch's init_scale)
  uint64_t seed = 0;
  std::string save;              // checkpoint written at each epoch's end and when stopping
  std::string resume;            // checkpoint to continue from
  std::string log;               // metrics as JSON lines
  std::string tensorboard;       // a folder for TensorBoard event files (tools/train/tensorboard.h)
  std::string data;              // the dataset's directory (Fashion-MNIST or Brown), overriding the default
  std::string dataset = "auto";  // auto (the model's kind: fashion-mnist, brown or brown-genre) | fashion-mnist
                                 // | synthetic | brown | synthetic-tokens | brown-genre
  bool augment = false;
  int64_t train_limit = 0;  // use only the first N training samples (windows for text; tests, quick runs)
  int64_t test_limit = 0;
  int64_t context = 0;                  // text models: tokens per window or passage (0 = the model's context)
  int64_t eval_every = 0;               // also evaluate every N optimizer steps (0 = at each epoch's end only)
  bool checkpoint_activations = false;  // recompute each block or stage in backward (mt::checkpoint)
  bool offload_optimizer = false;       // master weights and optimizer state in host memory (optim/optimizer.h)
  bool progress = true;                 // the live progress line on stderr
  // CPU threads for the kernels. 0 = auto: on the CPU device a ThreadTuner
  // (core/threads.h) times steps with each count up to mt::default_num_threads()
  // and keeps the fastest, trying again every few seconds. Results are the
  // same for every count.
  int64_t threads = 0;
  // ZeRO stage 1 (dist::ShardedOptimizer): each rank keeps 1/N of the
  // optimizer state and master weights; gradients are reduce-scattered and
  // the parameters all-gathered at each step.
  bool shard_optimizer = false;
  // With N ranks, an epoch whose samples do not divide by N: leave out the
  // tail (true) or pad the last shards by wrapping around (false, PyTorch's
  // DistributedSampler default).
  bool drop_uneven = false;
  // Train through DistributedDataParallel even in a world of one (mpirun
  // -np N > 1 always does): with MT_DIST_BACKEND=nccl, checks the data
  // parallel path, NCCL included, on a machine with one GPU.
  bool ddp = false;
  bool memory = false;  // print the memory ledger at the training peak beside its theory (--memory)
  // ---- seeing a run (tools/train/report.h) and the mixed-precision debugging aids
  std::string report;             // write the HTML report of this run here at its end (--report)
  bool keep_records = false;      // keep every logged record in TrainSummary::records (on with --report)
  bool record_grad_norm = false;  // measure the gradient norm every step even without --clip (on with --report)
  std::string command;            // the command line that started the run, for the log and the report
  bool detect_anomaly = false;    // stop at the first NaN/inf an op produces, naming it (mt::AnomalyMode)
  bool dtype_report = false;      // list the dtype autocast chose per module and op (first step)
  int64_t explain_skips = 0;      // name the parameters with inf/NaN gradients at the 1st and every Nth skip (0 = off)
  // Build the next batch on a background thread while the step runs. Off,
  // the memory peak no longer depends on when that thread ran (mixtape bench).
  bool prefetch = true;
  // CPU only, 0 = none: the run's tensors other than its dataset may hold at
  // most this many bytes once the data is loaded; an allocation beyond throws
  // OutOfMemoryError as a full GPU would (mixtape bench's batch search).
  int64_t memory_budget = 0;
};

// The dtype autocast computes in under a mixed precision (bf16, else f16).
DType low_precision_dtype(Precision p);

Device resolve_device(const std::string& text);

// mt::Error naming `what` unless the folder a file `path` would be written in exists.
void check_output_folder(const std::string& what, const std::string& path);

// Resolves the "auto" choices (model, precision, dataset) against the device the run will use.
TrainConfig resolve_defaults(const TrainConfig& requested, Device device);

// The configuration as the metrics log, the summary and checkpoints record it.
nlohmann::json config_json(const TrainConfig& c);

// The training and held-out splits `mixtape train` with this configuration
// would read, on the CPU, with out-of-range labels kept (`mixtape check-data`).
std::pair<data::Dataset, data::Dataset> load_training_data(const TrainConfig& c);

}  // namespace mt::tools
