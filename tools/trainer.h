// The training loop behind `mixtape train` (and the end-to-end tests): data,
// model, autocast, GradScaler, optimizer, schedule, gradient accumulation,
// clipping, evaluation, metrics and checkpoints, in the order PyTorch's AMP
// recipe uses.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "tools/data/dataset.h"

namespace mt::tools {

enum class Precision { Fp32, Fp16, Bf16 };
Precision parse_precision(const std::string& text);
std::string precision_name(Precision p);

struct TrainConfig {
  // The embedded default (`mixtape train` with no flags, what `make train`
  // runs): mixed precision on whatever device there is — mlp in bf16 on a
  // CPU, cnn in fp16 on a GPU — for 3 epochs.
  std::string model = "auto";      // auto | mlp | cnn | resnet
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
  bool cuda_graph = false;  // capture the whole step once and replay it (core/graph.h)
  double clip = 0;          // max gradient norm (0 = off)
  uint64_t seed = 0;
  std::string save;                       // checkpoint written at each epoch's end and when stopping
  std::string resume;                     // checkpoint to continue from
  std::string log;                        // metrics as JSON lines
  std::string data;                       // Fashion-MNIST directory override
  std::string dataset = "fashion-mnist";  // fashion-mnist | synthetic
  bool augment = false;
  int64_t train_limit = 0;  // use only the first N training samples (tests, quick runs)
  int64_t test_limit = 0;
  bool progress = true;  // the live progress line on stderr
};

struct TrainSummary {
  double test_accuracy = 0;
  std::vector<double> epoch_accuracies;
  std::vector<double> losses;  // one per optimizer step
  double seconds = 0;
  double samples_per_second = 0;  // training only: evaluation, checkpoints and the first (warm-up) step excluded
  int64_t peak_memory_bytes = 0;
  int64_t steps = 0;
  int64_t skipped_steps = 0;
  int64_t parameters = 0;
  double final_scale = 1;
  // Blocking device operations (core/host_sync.h) per optimizer step, over
  // the steps after the first; 0 means the host never waited for the device.
  double host_syncs_per_step = 0;
};

// Raised when the loss stops being finite; the message has the step, the
// recent loss-scale history and the last finite losses.
class NonFiniteLoss : public Error {
 public:
  using Error::Error;
};

TrainSummary train(const TrainConfig& config, std::FILE* out = stdout);

// Accuracy of `model` on `data` under the given precision (autocast as in training).
double evaluate(nn::Module& model, const data::Dataset& data, Precision precision, Device device, int64_t batch = 1000);

struct EvalResult {
  double accuracy = 0;
  std::string model;
  std::string precision;
  int64_t step = 0;
};
// `mixtape eval`: rebuilds the model named in the checkpoint and evaluates it on the test set.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device);

Device resolve_device(const std::string& text);

}  // namespace mt::tools
