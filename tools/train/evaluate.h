// Evaluation on a held-out split: accuracy and mean cross-entropy per
// target, under the autocast the model trained with (`mixtape eval`, and
// train() at each epoch's end or every --eval-every steps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/int8_quantize.h"
#include "nn/module.h"
#include "tools/data/dataset.h"
#include "tools/train/checkpoint.h"
#include "tools/train/config.h"

namespace mt::tools {

struct Evaluation {
  double accuracy = 0;  // the fraction of targets the argmax predicts
  double loss = 0;      // mean cross-entropy per target (nats)
  double perplexity() const;
};
// `model` on `data` under the given precision (autocast as in training), in
// batches of about `targets_per_batch` targets. An empty `data` is an
// mt::Error (0 of 0 is no accuracy, not 0%).
Evaluation evaluate(nn::Module& model, const data::TensorDataset& data, Precision precision, Device device,
                    int64_t targets_per_batch = 32768);

// One model's score and speed on the held-out split, and its weights' size.
struct ScoredModel {
  Evaluation evaluation;
  double samples_per_second = 0;
  int64_t weight_bytes = 0;  // its state's tensors (parameters and buffers)
};
// evaluate(), timed warm (after an untimed first pass).
ScoredModel score_model(nn::Module& model, const data::TensorDataset& test, Precision precision, Device device);

// An INT8 checkpoint's recipe (its "int8" metadata, from `mixtape
// quantize`) and the float checkpoint it came from, scored beside it when
// that file is still where quantize read it.
struct Int8Comparison {
  std::string observer;
  std::optional<double> smoothquant;  // its alpha
  int64_t calibration_samples = 0;
  std::vector<std::string> layers;
  std::vector<std::pair<std::string, std::string>> kept_float;  // layer, why
  std::vector<amp::int8::FoldedBatchNorm> folded;               // batch norms folded into their convolutions
  std::vector<amp::int8::Int8Handoff> handoffs;                 // u8 handed from layer to layer
  std::string source;
  bool source_scored = false;
  ScoredModel int8_model, float_model;  // float_model: measured now, or as quantize recorded it
};

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
  std::optional<Int8Comparison> int8;
};
// `mixtape eval`: rebuilds the model named in the checkpoint and evaluates
// it on the held-out split of the dataset it was trained on (its first
// `test_limit` samples when that is positive), in the precision it trained in.
// Weights holding NaN or inf are refused unless `nonfinite` allows them; an
// empty held-out split is refused.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device,
                               int64_t test_limit = 0, bool half = false,
                               NonFiniteWeights nonfinite = NonFiniteWeights::Refuse);

}  // namespace mt::tools
