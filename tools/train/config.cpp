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
  if (text == "fp8") return Precision::Fp8;
  fail("unknown precision '{}': expected fp32, fp16, bf16 or fp8", text);
}

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

std::optional<Precision> parse_precision_choice(const std::string& text) {
  if (text == "auto") return std::nullopt;
  return parse_precision(text);
}

std::string precision_choice_name(std::optional<Precision> p) { return p ? precision_name(*p) : "auto"; }

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "adamw") return OptimizerKind::AdamW;
  if (text == "sgd") return OptimizerKind::Sgd;
  fail("unknown optimizer '{}': expected adamw or sgd", text);
}

std::string optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::Sgd: return "sgd";
  }
  return "?";
}

ShardLevel parse_shard_level(const std::string& text) {
  if (text == "none") return ShardLevel::None;
  if (text == "grads") return ShardLevel::Grads;
  if (text == "params") return ShardLevel::Params;
  fail("unknown --shard '{}': expected none, grads or params", text);
}

std::string shard_level_name(ShardLevel level) {
  switch (level) {
    case ShardLevel::None: return "none";
    case ShardLevel::Grads: return "grads";
    case ShardLevel::Params: return "params";
  }
  return "?";
}

DType parse_float_dtype(const std::string& text) {
  if (text == "f32") return kF32;
  if (text == "bf16") return kBF16;
  if (text == "f16") return kF16;
  fail("unknown dtype '{}': expected f32, bf16 or f16", text);
}

ScheduleKind parse_schedule(const std::string& text) {
  if (text == "cosine") return ScheduleKind::Cosine;
  if (text == "constant") return ScheduleKind::Constant;
  if (text == "step") return ScheduleKind::Step;
  fail("unknown schedule '{}': expected cosine, constant or step", text);
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Step: return "step";
  }
  return "?";
}

DeviceChoice parse_device_choice(const std::string& text) {
  if (text == "auto") return {};
  DeviceChoice choice(parse_device(text));
  choice.index_named = text.find(':') != std::string::npos;
  return choice;
}

std::string device_choice_name(const DeviceChoice& d) {
  if (d.is_auto()) return "auto";
  if (d.device->is_cuda() && !d.index_named) return "cuda";
  return d.device->str();
}

void check_output_folder(const std::string& what, const std::string& path) {
  const std::filesystem::path folder = std::filesystem::absolute(path).parent_path();
  MT_CHECK(std::filesystem::is_directory(folder), "{} '{}': the folder {} does not exist (checked before training)",
           what, path, folder.string());
}

Device resolve_device(const DeviceChoice& choice) {
  if (choice.is_auto()) {
    try {
      allocator_for(kCUDA);
      return kCUDA;
    } catch (const Error&) {
      return kCPU;  // no usable GPU: the CPU it is
    }
  }
  allocator_for(*choice.device);  // a clear error now if the device is unavailable
  return *choice.device;
}

Device resolve_device(const std::string& text) { return resolve_device(parse_device_choice(text)); }

// FP8 rides on BF16 autocast: everything but the FP8 GEMMs runs as under bf16.
DType low_precision_dtype(Precision p) { return p == Precision::Bf16 || p == Precision::Fp8 ? kBF16 : kF16; }

std::string resolve_model(const std::string& model, Device device) {
  return model == "auto" ? models::default_model(device) : model;
}

// Resolves the "auto" choices against the device the run will use.
TrainConfig resolve_defaults(const TrainConfig& requested, Device device) {
  TrainConfig c = requested;
  c.model = resolve_model(c.model, device);
  if (!c.precision.mode) c.precision.mode = device.is_cpu() ? Precision::Bf16 : Precision::Fp16;  // autocast's defaults
  if (c.data.dataset == "auto") c.data.dataset = data::default_dataset(models::model_info(c.model).task).name;
  return c;
}

nlohmann::json config_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"precision", precision_choice_name(c.precision.mode)},
          {"master_weights", c.precision.master_weights},
          {"device", device_choice_name(c.device)},
          {"epochs", c.epochs},
          {"steps", c.max_steps},
          {"batch", c.batch},
          {"lr", c.optim.lr},
          {"optimizer", optimizer_name(c.optim.optimizer)},
          {"weight_decay", c.optim.weight_decay},
          {"schedule", schedule_name(c.optim.schedule)},
          {"warmup", c.optim.warmup},
          {"grad_accum", c.optim.grad_accum},
          {"cuda_graph", c.cuda_graph},
          {"clip", c.optim.clip},
          {"init_scale", c.precision.init_scale},
          {"fp8_recipe", amp::fp8_recipe_name(c.precision.fp8.recipe)},
          {"fp8_history", c.precision.fp8.history},
          {"fp8_margin", c.precision.fp8.margin},
          {"fp8_keep_bf16", c.precision.fp8.keep_bf16},
          {"fp8_stats", c.precision.fp8.stats_every},
          {"fp8_shadow", c.precision.fp8.shadow_every},
          {"seed", c.seed},
          {"dataset", c.data.dataset},
          {"augment", c.data.augment},
          {"context", c.data.context},
          {"tokenizer", c.data.tokenizer},
          {"eval_every", c.report.eval_every},
          {"checkpoint_activations", c.memory.checkpoint_activations},
          {"offload_optimizer", c.optim.offload},
          {"optimizer_state", optim::state_dtype_name(c.optim.state)},
          {"optimizer_state_block", c.optim.state_block},
          {"shard_optimizer", c.parallel.shard_optimizer},
          {"shard", shard_level_name(c.parallel.shard)},
          {"save_sharded", c.checkpoint.sharded},
          {"param_dtype", c.parallel.param_dtype ? std::string(dtype_name(*c.parallel.param_dtype)) : "model"},
          {"reduce_dtype", std::string(dtype_name(c.parallel.reduce_dtype))},
          {"ddp", c.parallel.ddp},
          {"drop_uneven", c.parallel.drop_uneven},
          {"sync_bn", c.parallel.sync_bn},
          {"world_size", dist::world().size()},
          {"threads", c.parallel.threads}};
}

// ---------------------------------------------------------------- the datasets

namespace {

// The tokens per window a language-model run trains on.
int64_t window_length(const DataOptions& d, const models::ModelInfo& model) {
  MT_CHECK(d.context >= 0 && d.context <= model.context, "train: --context {} does not fit {}'s context of {}",
           d.context, model.name, model.context);
  return d.context > 0 ? d.context : model.context;
}

}  // namespace

Splits load_data(const TrainConfig& c, const models::ModelInfo& model, data::LabelCheck labels) {
  const DataOptions& d = c.data;
  const data::DatasetInfo& dataset = data::find_dataset(d.dataset);
  MT_CHECK(dataset.task == model.task, "train: {} is {} model but {} is {} dataset", model.name,
           models::task_noun(model.task), d.dataset, models::task_noun(dataset.task));
  const MemoryCategoryScope data_memory(MemoryCategory::Data);  // the whole dataset lives in memory
  return dataset.load({.dir = d.dir,
                       .model = model,
                       .window = models::reads_tokens(model.task) ? window_length(d, model) : 0,
                       .train_limit = d.train_limit,
                       .test_limit = d.test_limit,
                       .labels = labels,
                       .tokenizer = d.tokenizer});
}

std::pair<data::TensorDataset, data::TensorDataset> load_training_data(const TrainConfig& requested) {
  const TrainConfig c = resolve_defaults(requested, kCPU);
  Splits s = load_data(c, models::model_info(c.model), data::LabelCheck::Keep);
  return {std::move(s.train), std::move(s.test)};
}

}  // namespace mt::tools
