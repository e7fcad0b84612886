#include "tools/train/config.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "autograd/ops.h"
#include "distributed/process_group.h"
#include "models/bert.h"
#include "models/registry.h"
#include "tools/data/text.h"
#include "tools/train/run.h"

namespace mt::tools {

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::Fp32;
  if (text == "fp16") return Precision::Fp16;
  if (text == "bf16") return Precision::Bf16;
  fail("unknown precision '{}': expected fp32, fp16 or bf16", text);
}

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}

void check_output_folder(const std::string& what, const std::string& path) {
  const std::filesystem::path folder = std::filesystem::absolute(path).parent_path();
  MT_CHECK(std::filesystem::is_directory(folder), "{} '{}': the folder {} does not exist (checked before training)",
           what, path, folder.string());
}

Device resolve_device(const std::string& text) {
  if (text == "auto") {
    try {
      allocator_for(kCUDA);
      return kCUDA;
    } catch (const Error&) {
      return kCPU;  // no usable GPU: the CPU it is
    }
  }
  const Device d = parse_device(text);
  allocator_for(d);  // a clear error now if the device is unavailable
  return d;
}

DType low_precision_dtype(Precision p) { return p == Precision::Bf16 ? kBF16 : kF16; }

// Resolves the "auto" choices against the device the run will use.
TrainConfig resolve_defaults(const TrainConfig& requested, Device device) {
  TrainConfig c = requested;
  if (c.model == "auto") c.model = device.is_cpu() ? "mlp" : "cnn";
  if (c.precision == "auto") c.precision = device.is_cpu() ? "bf16" : "fp16";  // autocast's default dtypes
  if (c.dataset == "auto") {
    switch (models::model_info(c.model).task) {
      case models::ModelTask::ImageClassification: c.dataset = "fashion-mnist"; break;
      case models::ModelTask::LanguageModel: c.dataset = "brown"; break;
      case models::ModelTask::TextClassification: c.dataset = "brown-genre"; break;
    }
  }
  return c;
}

nlohmann::json config_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"precision", c.precision},
          {"master_weights", c.master_weights},
          {"device", c.device},
          {"epochs", c.epochs},
          {"steps", c.max_steps},
          {"batch", c.batch},
          {"lr", c.lr},
          {"optimizer", c.optimizer},
          {"weight_decay", c.weight_decay},
          {"schedule", c.schedule},
          {"warmup", c.warmup},
          {"grad_accum", c.grad_accum},
          {"cuda_graph", c.cuda_graph},
          {"clip", c.clip},
          {"init_scale", c.init_scale},
          {"seed", c.seed},
          {"dataset", c.dataset},
          {"augment", c.augment},
          {"context", c.context},
          {"eval_every", c.eval_every},
          {"checkpoint_activations", c.checkpoint_activations},
          {"offload_optimizer", c.offload_optimizer},
          {"shard_optimizer", c.shard_optimizer},
          {"ddp", c.ddp},
          {"drop_uneven", c.drop_uneven},
          {"world_size", dist::world().size()},
          {"threads", c.threads}};
}

// ---------------------------------------------------------------- the datasets

namespace {

data::Dataset limit(const data::Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  data::Dataset out = d;
  out.inputs = d.inputs.narrow(0, 0, n).contiguous();
  out.targets = d.targets.narrow(0, 0, n).contiguous();
  return out;
}

// At most n samples spread evenly over `d` (a prefix of a set ordered by
// document would hold only the first genres).
data::Dataset spread(const data::Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  std::vector<int64_t> picks(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) picks[static_cast<size_t>(i)] = i * d.size() / n;
  const Tensor index = from_vector(picks, {n}, kI64);
  data::Dataset out = d;
  out.inputs = index_select(d.inputs, 0, index).contiguous();
  out.targets = index_select(d.targets, 0, index).contiguous();
  return out;
}

// The tokens per window a language-model run trains on.
int64_t window_length(const TrainConfig& c, const models::ModelInfo& model) {
  MT_CHECK(c.context >= 0 && c.context <= model.context, "train: --context {} does not fit {}'s context of {}",
           c.context, model.name, model.context);
  return c.context > 0 ? c.context : model.context;
}

// The task a dataset trains.
models::ModelTask dataset_task(const std::string& dataset) {
  if (dataset == "fashion-mnist" || dataset == "synthetic") return models::ModelTask::ImageClassification;
  if (dataset == "brown" || dataset == "synthetic-tokens") return models::ModelTask::LanguageModel;
  if (dataset == "brown-genre") return models::ModelTask::TextClassification;
  fail("unknown dataset '{}': expected fashion-mnist, synthetic, brown, synthetic-tokens or brown-genre", dataset);
}

std::string task_noun(models::ModelTask task) {
  switch (task) {
    case models::ModelTask::ImageClassification: return "an image-classification";
    case models::ModelTask::LanguageModel: return "a language";
    case models::ModelTask::TextClassification: return "a text-classification";
  }
  return "?";
}

}  // namespace

Splits load_data(const TrainConfig& c, const models::ModelInfo& model, data::LabelCheck labels) {
  const models::ModelTask task = dataset_task(c.dataset);
  MT_CHECK(task == model.task, "train: {} is {} model but {} is {} dataset", model.name, task_noun(model.task),
           c.dataset, task_noun(task));
  const MemoryCategoryScope data_memory(MemoryCategory::Data);  // the whole dataset lives in memory
  Splits s;
  if (c.dataset == "synthetic") {
    s.train = data::synthetic_images(c.train_limit > 0 ? c.train_limit : 4096, 10, 28, 28, 1);
    s.test = data::synthetic_images(c.test_limit > 0 ? c.test_limit : 1024, 10, 28, 28, 2);
    return s;
  }
  if (c.dataset == "synthetic-tokens") {
    const int64_t t = window_length(c, model);
    s.train = data::synthetic_tokens(c.train_limit > 0 ? c.train_limit : 2048, t, model.vocab, 1);
    s.test = data::synthetic_tokens(c.test_limit > 0 ? c.test_limit : 256, t, model.vocab, 1, /*stream=*/1);
    return s;
  }
  if (c.dataset == "brown-genre") {
    static_assert(data::kClsToken == models::kBertCls && data::kPadToken == models::kBertPad);
    data::TextSplits passages = data::brown_genre_passages(window_length(c, model), c.data);
    s.train = spread(passages.train, c.train_limit);
    s.test = spread(passages.validation, c.test_limit);
    return s;
  }
  if (c.dataset == "brown") {
    MT_CHECK(model.vocab >= data::kByteVocabulary, "train: {}'s vocabulary of {} cannot hold Brown's 256 bytes",
             model.name, model.vocab);
    data::TextSplits text_splits = data::brown_language_model(window_length(c, model), c.data);
    s.train = limit(text_splits.train, c.train_limit);
    s.test = limit(text_splits.validation, c.test_limit);
    return s;
  }
  data::FashionMnist f = data::load_fashion_mnist(c.data, labels);
  s.train = limit(f.train, c.train_limit);
  s.test = limit(f.test, c.test_limit);
  return s;
}

std::pair<data::Dataset, data::Dataset> load_training_data(const TrainConfig& requested) {
  const TrainConfig c = resolve_defaults(requested, kCPU);
  Splits s = load_data(c, models::model_info(c.model), data::LabelCheck::Keep);
  return {std::move(s.train), std::move(s.test)};
}

}  // namespace mt::tools
