// Evaluation on a held-out split: accuracy and mean cross-entropy per
// target, under the autocast the model trained with (`mixtape eval`, and
// train() at each epoch's end or every --eval-every steps).
#pragma once

#include <cstdint>
#include <string>

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
// Weights holding NaN or inf are refused unless `nonfinite` allows them; an
// empty held-out split is refused.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device,
                               int64_t test_limit = 0, bool half = false,
                               NonFiniteWeights nonfinite = NonFiniteWeights::Refuse);

}  // namespace mt::tools
