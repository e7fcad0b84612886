#include "tools/train/config.h"

#include <filesystem>

#include "distributed/process_group.h"
#include "models/registry.h"
#include "tools/data/registry.h"
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
  if (c.model == "auto") c.model = models::default_model(device);
  if (c.precision == "auto") c.precision = device.is_cpu() ? "bf16" : "fp16";  // autocast's default dtypes
  if (c.dataset == "auto") c.dataset = data::default_dataset(models::model_info(c.model).task).name;
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

// The tokens per window a language-model run trains on.
int64_t window_length(const TrainConfig& c, const models::ModelInfo& model) {
  MT_CHECK(c.context >= 0 && c.context <= model.context, "train: --context {} does not fit {}'s context of {}",
           c.context, model.name, model.context);
  return c.context > 0 ? c.context : model.context;
}

}  // namespace

Splits load_data(const TrainConfig& c, const models::ModelInfo& model, data::LabelCheck labels) {
  const data::DatasetInfo& dataset = data::find_dataset(c.dataset);
  MT_CHECK(dataset.task == model.task, "train: {} is {} model but {} is {} dataset", model.name,
           models::task_noun(model.task), c.dataset, models::task_noun(dataset.task));
  const MemoryCategoryScope data_memory(MemoryCategory::Data);  // the whole dataset lives in memory
  return dataset.load({.dir = c.data,
                       .model = model,
                       .window = models::reads_tokens(model.task) ? window_length(c, model) : 0,
                       .train_limit = c.train_limit,
                       .test_limit = c.test_limit,
                       .labels = labels});
}

std::pair<data::Dataset, data::Dataset> load_training_data(const TrainConfig& requested) {
  const TrainConfig c = resolve_defaults(requested, kCPU);
  Splits s = load_data(c, models::model_info(c.model), data::LabelCheck::Keep);
  return {std::move(s.train), std::move(s.test)};
}

}  // namespace mt::tools
