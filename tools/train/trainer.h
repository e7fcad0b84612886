// The training loop behind `mixtape train` (and the end-to-end tests): data,
// model, autocast, GradScaler, optimizer, schedule, gradient accumulation,
// clipping, evaluation, metrics and checkpoints, in the order PyTorch's AMP
// recipe uses.
#pragma once

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "tools/data/dataset.h"
#include "tools/train/memory_report.h"

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

struct Evaluation {
  double accuracy = 0;  // the fraction of targets the argmax predicts
  double loss = 0;      // mean cross-entropy per target (nats)
  double perplexity() const;
};
// `model` on `data` under the given precision (autocast as in training), in
// batches of about `targets_per_batch` targets.
Evaluation evaluate(nn::Module& model, const data::Dataset& data, Precision precision, Device device,
                    int64_t targets_per_batch = 32768);

struct EvalResult {
  Evaluation evaluation;
  bool language_model = false;
  std::string model;
  std::string precision;
  std::string dataset;
  int64_t step = 0;
  // `half`: the same model converted to f16 (GPU, sim) or bf16 (CPU)
  // weights with its norm layers kept in f32 (Module::to), evaluated under
  // autocast to that dtype, beside the f32-weight model under the same
  // autocast; and the memory ledger's parameter bytes before and after.
  bool half = false;
  std::string half_dtype;
  Evaluation autocast_evaluation, half_evaluation;
  int64_t parameter_bytes = 0, half_parameter_bytes = 0;
};
// `mixtape eval`: rebuilds the model named in the checkpoint and evaluates
// it on the held-out split of the dataset it was trained on (its first
// `test_limit` samples when that is positive), in the precision it trained in.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device,
                               int64_t test_limit = 0, bool half = false);

// The model of a checkpoint written by train() (the model named in its
// metadata, in the stored dtype), on `device`.
std::shared_ptr<nn::Module> load_model_checkpoint(const SafetensorsFile& checkpoint, const std::string& path,
                                                  Device device);

// The run configuration a checkpoint's metadata records (the model,
// precision, dataset and context; older checkpoints: the defaults), its
// types checked.
TrainConfig checkpoint_config(const SafetensorsFile& checkpoint, const std::string& path);

Device resolve_device(const std::string& text);

// mt::Error naming `what` unless the folder a file `path` would be written in exists.
void check_output_folder(const std::string& what, const std::string& path);

// The training and held-out splits `mixtape train` with this configuration
// would read, on the CPU, with out-of-range labels kept (`mixtape check-data`).
std::pair<data::Dataset, data::Dataset> load_training_data(const TrainConfig& c);

// ---- training checkpoints: what train() saves with --save and restores with --resume

// Where a run stood when it saved.
struct CheckpointPosition {
  int64_t epoch = 0;           // epoch in progress
  int64_t batch_in_epoch = 0;  // next batch to train on
  int64_t step = 0;            // optimizer steps done
};

// The model's state, `optimizer_state` (an unsharded optimizer's
// state_dict: ZeRO's consolidated one), the scaler's and the schedule's
// state, the position, the RNG and the run's configuration, written
// atomically to `path` (safetensors).
void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::StateDict& optimizer_state, const amp::GradScaler& scaler,
                     const optim::LrScheduler& sched, const CheckpointPosition& pos);

// Restores a checkpoint into a run of configuration `c` whose epochs have
// `batches` batches, refusing (mt::Error naming the file and the field)
// anything that does not fit: another model, another dtype, non-finite
// weights or optimizer state, negative second moments, metadata that is not
// a whole number in range, another world size. The file is another person's
// until it has been checked: the fuzzer (tests/fuzz) feeds it garbage.
using LoadOptimizerState = std::function<void(const optim::StateDict&)>;
CheckpointPosition load_checkpoint(const std::string& path, const TrainConfig& c, int64_t batches, nn::Module& model,
                                   const LoadOptimizerState& load_optimizer, amp::GradScaler& scaler,
                                   optim::LrScheduler& sched);

}  // namespace mt::tools
