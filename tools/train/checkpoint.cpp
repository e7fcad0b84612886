#include "tools/train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "amp/int8_quantize.h"
#include "autograd/grad_mode.h"
#include "core/generator.h"
#include "distributed/process_group.h"
#include "models/registry.h"

namespace mt::tools {

namespace {

// The most optimizer steps a checkpoint may record: the metrics log carries
// steps as JSON numbers (doubles, exact to 2^53), and a run resumed from it
// adds its steps without overflowing int64 (INT64_MAX resumed and printed
// "-9223372036854775788 steps").
constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

// A whole decimal integer within [low, high]: "12abc", "", "1e3" and
// out-of-range values are refused, never read leniently.
template <typename Int = int64_t>
Int metadata_int(const SafetensorsFile& f, const std::string& key, const std::string& path,
                 Int low = std::numeric_limits<Int>::min(), Int high = std::numeric_limits<Int>::max()) {
  auto it = f.metadata.find(key);
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no '{}' in its metadata (not a mixtape checkpoint?)", path,
           key);
  const std::string& text = it->second;
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  MT_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty(),
           "checkpoint '{}': metadata '{}' = '{}' is not a whole number", path, key, text);
  MT_CHECK(value >= low && value <= high, "checkpoint '{}': metadata '{}' = {} is outside [{}, {}]", path, key, value,
           low, high);
  return value;
}

// Every floating-point tensor of a checkpoint finite, and Adam's second
// moments not negative: a poisoned file is refused before it is trained on
// (and written back).
template <typename T>
bool all_finite_and_at_least(const T* values, int64_t n, double low) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i]) || values[i] < low) return false;
  }
  return true;
}

// `refusal` says what is refused and how to overrule it, if one can.
void check_checkpoint_values(const std::map<std::string, Tensor>& tensors, const std::string& path,
                             const std::string& refusal) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    // FP8 state has its own rules (an inf amax records an overflow): amp::Fp8State::load_state_dict.
    if (!is_floating(t.dtype()) || t.numel() == 0 || name.rfind("fp8.", 0) == 0) continue;
    const bool second_moment = name.size() >= 10 && name.compare(name.size() - 10, 10, "exp_avg_sq") == 0;
    const double low = second_moment ? 0.0 : -std::numeric_limits<double>::infinity();
    // f16/bf16 widen to f32 exactly; f32 and f64 are read where they are.
    const Tensor values = t.dtype() == kF64 ? t.contiguous() : t.to(kF32).contiguous();
    const bool ok = values.dtype() == kF64 ? all_finite_and_at_least(values.data<double>(), values.numel(), low)
                                           : all_finite_and_at_least(values.data<float>(), values.numel(), low);
    MT_CHECK(ok, "checkpoint '{}': '{}' holds {}; {}", path, name,
             second_moment ? "non-finite or negative second moments" : "non-finite values (NaN or inf)", refusal);
  }
}

// The dtype rule, one for --resume, eval and generate: a checkpoint's
// tensors must be stored in the dtype the model keeps them in, and are
// refused otherwise, naming the tensor -- never cast. (PyTorch's
// load_state_dict copies an f64 tensor into an f32 parameter; a cast here
// would hide a file from another setting or tool, and a resumed run would
// continue from other numbers than it saved.)
void check_stored_dtypes(const std::map<std::string, Tensor>& stored, const nn::Module& model, const std::string& path,
                         const std::string& hint) {
  for (const auto& [name, t] : model.state_dict()) {
    auto at = stored.find(name);
    MT_CHECK(at == stored.end() || at->second.dtype() == t.dtype(),
             "checkpoint '{}': '{}' is stored as {} but the model keeps it in {} ({})", path, name, at->second.dtype(),
             t.dtype(), hint);
  }
}

std::string metadata_text(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no '{}' in its metadata (not a mixtape checkpoint?)", path,
           key);
  return it->second;
}

std::map<std::string, Tensor> with_prefix(const SafetensorsFile& f, const std::string& prefix, bool strip) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : f.tensors) {
    const bool has = k.rfind(prefix, 0) == 0;
    if (strip && has) out[k.substr(prefix.size())] = v;
  }
  return out;
}

std::map<std::string, Tensor> model_tensors(const SafetensorsFile& f) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : f.tensors) {
    if (k.rfind("optimizer.", 0) != 0 && k.rfind("scaler.", 0) != 0 && k.rfind("fp8.", 0) != 0) out[k] = v;
  }
  return out;
}

}  // namespace

namespace {

// What every checkpoint records besides its tensors: its format, the run's
// configuration, the position, the schedule, the RNG and the world size.
std::map<std::string, std::string> checkpoint_metadata(const char* format, const TrainConfig& c,
                                                       const optim::LrScheduler& sched, const CheckpointPosition& pos) {
  const GeneratorState rng = default_generator().state();
  return {{"format", format},
          {"config", config_json(c).dump()},
          {"model", c.model},
          {"precision", precision_choice_name(c.precision.mode)},
          {"epoch", std::to_string(pos.epoch)},
          {"sample_in_epoch", std::to_string(pos.sample_in_epoch)},
          {"step", std::to_string(pos.step)},
          {"scheduler_step", std::to_string(sched.last_step())},
          {"rng_seed", std::to_string(rng.seed)},
          {"rng_offset", std::to_string(rng.offset)},
          {"world_size", std::to_string(dist::world().size())}};
}

// The inverse for a run of `c` whose epochs have `samples` samples: the
// RNG, the schedule and the position.
CheckpointPosition restore_position(const SafetensorsFile& f, const std::string& path, const TrainConfig& c,
                                    int64_t samples, optim::LrScheduler& sched) {
  default_generator().set_state(
      {metadata_int<uint64_t>(f, "rng_seed", path), metadata_int<uint64_t>(f, "rng_offset", path)});
  CheckpointPosition pos{.epoch = metadata_int(f, "epoch", path, int64_t{0}, c.epochs),
                         .step = metadata_int(f, "step", path, int64_t{0}, kMaxCheckpointStep),
                         .saved_world = f.metadata.count("world_size")
                                            ? metadata_int(f, "world_size", path, int64_t{1}, int64_t{1} << 20)
                                            : 1};
  sched.set_step(metadata_int(f, "scheduler_step", path, int64_t{0}, pos.step));
  if (f.metadata.count("sample_in_epoch") > 0) {
    pos.sample_in_epoch = metadata_int(f, "sample_in_epoch", path, int64_t{0}, samples);
    return pos;
  }
  // Checkpoints of 2026-12-05 and before counted batches per rank, which
  // only the same world size (and batch) can continue.
  MT_CHECK(pos.saved_world == dist::world().size(),
           "checkpoint '{}' was written by a run of {} rank(s) before positions counted samples; resume it with the "
           "same number (this run has {})",
           path, pos.saved_world, dist::world().size());
  const int64_t batch = metadata_int(f, "batch_in_epoch", path, int64_t{0}, samples);
  pos.sample_in_epoch = std::min(batch * c.batch * pos.saved_world, samples);
  return pos;
}

constexpr const char* kShardedFormat = "mixtape-sharded-checkpoint-1";

// A sharded checkpoint's index met where a whole one is needed.
void refuse_sharded(const SafetensorsFile& f, const std::string& path, const char* what) {
  MT_CHECK(!is_sharded_checkpoint(f),
           "checkpoint '{}' is sharded (--save-sharded: one file per rank); {} needs a whole one: resume it with "
           "mpirun -np {} mixtape train --shard ... --resume and save it with --save alone",
           path, what, f.metadata.count("world_size") ? f.metadata.at("world_size") : "N");
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::StateDict& optimizer_state, const amp::GradScaler& scaler,
                     const optim::LrScheduler& sched, const CheckpointPosition& pos, const amp::Fp8State* fp8) {
  std::map<std::string, Tensor> tensors = model.state_dict();
  for (const auto& [k, v] : optimizer_state) tensors["optimizer." + k] = v;
  for (const auto& [k, v] : scaler.state_dict()) tensors["scaler." + k] = v;
  if (fp8 != nullptr) {
    for (const auto& [k, v] : fp8->state_dict(model)) tensors["fp8." + k] = v;
  }
  save_safetensors(path, tensors, checkpoint_metadata("mixtape-checkpoint-1", c, sched, pos));
}

std::string sharded_checkpoint_file(const std::string& path, int rank, int world) {
  const std::string suffix = ".safetensors";
  const bool has_suffix =
      path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = has_suffix ? path.substr(0, path.size() - suffix.size()) : path;
  return fmt::format("{}.rank{}-of-{}{}", stem, rank, world, suffix);
}

void save_sharded_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                             const LocalShards& mine, const amp::GradScaler& scaler, const optim::LrScheduler& sched,
                             const CheckpointPosition& pos, int rank, int world) {
  std::map<std::string, Tensor> tensors{{"master", mine.master}};
  for (const auto& [k, v] : mine.optimizer) tensors["optimizer." + k] = v;
  for (const auto& [k, v] : model.named_buffers()) tensors["buffers." + k] = v;
  std::map<std::string, std::string> metadata = checkpoint_metadata(kShardedFormat, c, sched, pos);
  metadata["rank"] = std::to_string(rank);
  metadata["layout"] = mine.layout;
  save_safetensors(sharded_checkpoint_file(path, rank, world), tensors, metadata);
  dist::world().barrier();  // every shard is on disk before the index names them
  if (rank != 0) return;
  std::map<std::string, Tensor> index;
  for (const auto& [k, v] : scaler.state_dict()) index["scaler." + k] = v;
  metadata.erase("rank");
  save_safetensors(path, index, metadata);
}

bool is_sharded_checkpoint(const SafetensorsFile& f) {
  auto it = f.metadata.find("format");
  return it != f.metadata.end() && it->second == kShardedFormat;
}

CheckpointPosition load_sharded_checkpoint(const std::string& path, const TrainConfig& c, int64_t samples,
                                           nn::Module& model, const std::string& layout, const LoadLocalShards& load,
                                           amp::GradScaler& scaler, optim::LrScheduler& sched, int rank, int world) {
  const SafetensorsFile index = load_safetensors(path);
  MT_CHECK(is_sharded_checkpoint(index), "checkpoint '{}' is not a sharded checkpoint's index", path);
  MT_CHECK(metadata_text(index, "model", path) == c.model, "checkpoint '{}' holds a '{}' model but --model is '{}'",
           path, metadata_text(index, "model", path), c.model);
  const CheckpointPosition pos = restore_position(index, path, c, samples, sched);
  MT_CHECK(pos.saved_world == world,
           "checkpoint '{}' is sharded over {} rank(s), this run has {}: resume it with the same number, or resume it "
           "at {} and save a whole one with --save alone, which any world size resumes",
           path, pos.saved_world, world, pos.saved_world);
  MT_CHECK(metadata_text(index, "layout", path) == layout,
           "checkpoint '{}' was sharded over units of {} elements per rank, this run's are {} (another model, "
           "wrapping or world size)",
           path, metadata_text(index, "layout", path), layout);
  const std::string own = sharded_checkpoint_file(path, rank, world);
  const SafetensorsFile f = load_safetensors(own);
  MT_CHECK(is_sharded_checkpoint(f) && metadata_int(f, "rank", own, 0, world - 1) == rank &&
               metadata_int(f, "step", own, int64_t{0}, kMaxCheckpointStep) == pos.step &&
               metadata_text(f, "layout", own) == layout,
           "checkpoint '{}' is not rank {}'s shard of '{}' (another save's, or another rank's)", own, rank, path);
  check_checkpoint_values(f.tensors, own, "refusing to resume from it");
  auto master = f.tensors.find("master");
  MT_CHECK(master != f.tensors.end() && master->second.dtype() == kF32 && master->second.dim() == 1,
           "checkpoint '{}' has no f32 'master' shard", own);
  try {
    load({master->second, with_prefix(f, "optimizer.", true), layout});
    std::map<std::string, Tensor> buffers = with_prefix(f, "buffers.", true);
    for (const auto& [name, b] : model.named_buffers()) {
      auto it = buffers.find(name);
      MT_CHECK(it != buffers.end() && it->second.sizes() == b.sizes() && it->second.dtype() == b.dtype(),
               "buffer '{}' is missing or of another shape or dtype", name);
      NoGradGuard no_grad;
      copy_(b, it->second.to(b.device()));
      buffers.erase(it);
    }
    MT_CHECK(buffers.empty(), "buffer '{}' is not the model's", buffers.empty() ? "" : buffers.begin()->first);
    scaler.load_state_dict(with_prefix(index, "scaler.", true));
  } catch (const Error& e) {
    fail("checkpoint '{}' does not match this run: {}", own, e.what());
  }
  return pos;
}

CheckpointPosition load_checkpoint(const std::string& path, const TrainConfig& c, int64_t samples, nn::Module& model,
                                   const LoadOptimizerState& load_optimizer, amp::GradScaler& scaler,
                                   optim::LrScheduler& sched, amp::Fp8State* fp8) {
  const SafetensorsFile f = load_safetensors(path);
  refuse_sharded(f, path, "a run without --shard");
  auto it = f.metadata.find("model");
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no model name in its metadata (not a mixtape checkpoint?)",
           path);
  MT_CHECK(it->second == c.model, "checkpoint '{}' holds a '{}' model but --model is '{}'", path, it->second, c.model);
  check_checkpoint_values(f.tensors, path, "refusing to resume from it");
  const auto stored = model_tensors(f);
  check_stored_dtypes(stored, model, path, "a checkpoint of another --precision or --master-weights setting?");
  try {
    model.load_state_dict(stored);
    load_optimizer(with_prefix(f, "optimizer.", true));
    scaler.load_state_dict(with_prefix(f, "scaler.", true));
    if (fp8 != nullptr) fp8->load_state_dict(model, with_prefix(f, "fp8.", true));
  } catch (const Error& e) {
    fail("checkpoint '{}' does not match this run: {}", path, e.what());
  }
  return restore_position(f, path, c, samples, sched);
}

// ---------------------------------------------------------------- reading a checkpoint back

namespace {

// The run configuration a checkpoint records: an empty object for older
// checkpoints without one.
nlohmann::json recorded_config(const SafetensorsFile& f, const std::string& path) {
  auto it = f.metadata.find("config");
  if (it == f.metadata.end()) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  MT_CHECK(j.is_object(), "checkpoint '{}': its 'config' metadata is not a JSON object", path);
  return j;
}

}  // namespace

std::vector<amp::int8::FoldedBatchNorm> folded_batch_norms(const nlohmann::json& int8, const std::string& path) {
  std::vector<amp::int8::FoldedBatchNorm> folded;
  if (!int8.is_object() || !int8.contains("folded_batch_norms")) return folded;
  const nlohmann::json& pairs = int8["folded_batch_norms"];
  MT_CHECK(pairs.is_array(), "checkpoint '{}': its 'int8' folded_batch_norms is not a list", path);
  for (const auto& pair : pairs) {
    MT_CHECK(pair.is_object() && pair.contains("conv") && pair["conv"].is_string() && pair.contains("batch_norm") &&
                 pair["batch_norm"].is_string(),
             "checkpoint '{}': an 'int8' folded batch norm is not a {{\"conv\", \"batch_norm\"}} pair of names", path);
    folded.push_back({pair["conv"].get<std::string>(), pair["batch_norm"].get<std::string>()});
  }
  return folded;
}

std::vector<amp::int8::Int8Handoff> int8_handoffs(const nlohmann::json& int8, const std::string& path) {
  std::vector<amp::int8::Int8Handoff> handoffs;
  if (!int8.is_object() || !int8.contains("handoffs")) return handoffs;
  const nlohmann::json& list = int8["handoffs"];
  MT_CHECK(list.is_array(), "checkpoint '{}': its 'int8' handoffs is not a list", path);
  for (const auto& h : list) {
    MT_CHECK(h.is_object() && h.contains("from") && h["from"].is_string() && h.contains("to") && h["to"].is_string() &&
                 h.contains("relu") && h["relu"].is_boolean(),
             "checkpoint '{}': an 'int8' handoff is not {{\"from\", \"to\", \"relu\"}} (two names and a bool)", path);
    handoffs.push_back({h["from"].get<std::string>(), h["to"].get<std::string>(), h["relu"].get<bool>()});
  }
  return handoffs;
}

namespace {

// The Linear layers an INT8 checkpoint quantized (its "int8" metadata, a
// JSON object written by `mixtape quantize`) and whether SmoothQuant
// smoothed them; none for any other checkpoint.
struct Int8Layers {
  std::vector<std::string> names;
  bool smoothed = false;
  std::vector<amp::int8::FoldedBatchNorm> folded;
  std::vector<amp::int8::Int8Handoff> handoffs;
};

Int8Layers int8_layers(const SafetensorsFile& f, const std::string& path) {
  auto it = f.metadata.find("int8");
  if (it == f.metadata.end()) return {};
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  MT_CHECK(j.is_object() && j.contains("layers") && j["layers"].is_array(),
           "checkpoint '{}': its 'int8' metadata is not a JSON object with a 'layers' list", path);
  Int8Layers layers;
  for (const auto& layer : j["layers"]) {
    MT_CHECK(layer.is_string(), "checkpoint '{}': an 'int8' layer name is not a string", path);
    layers.names.push_back(layer.get<std::string>());
  }
  layers.smoothed = j.contains("smoothquant") && j["smoothquant"].is_number();
  layers.folded = folded_batch_norms(j, path);
  layers.handoffs = int8_handoffs(j, path);
  return layers;
}

// The dtype a checkpoint keeps its parameters in: f32, or under
// --master-weights the run's f16/bf16 (its norm layers in f32), as its
// recorded configuration says; a checkpoint without that record, by its
// first f16/bf16 parameter.
DType stored_parameter_dtype(const SafetensorsFile& f, const std::map<std::string, Tensor>& state,
                             const nn::Module& model, const std::string& path) {
  if (recorded_config(f, path).contains("master_weights")) {
    const TrainConfig c = checkpoint_config(f, path);
    const bool low = c.precision.master_weights && c.precision.mode && *c.precision.mode != Precision::Fp32;
    return low ? low_precision_dtype(*c.precision.mode) : kF32;
  }
  for (const auto& [param_name, p] : model.named_parameters()) {
    auto it = state.find(param_name);
    if (it != state.end() && (it->second.dtype() == kF16 || it->second.dtype() == kBF16)) return it->second.dtype();
  }
  return kF32;
}

// The model a checkpoint names, in the dtype its parameters were stored in
// (a master-weight run stores f16/bf16 parameters), its weights checked finite
// unless `nonfinite` allows them.
std::shared_ptr<nn::Module> model_from(const SafetensorsFile& f, const std::string& path, Device device,
                                       NonFiniteWeights nonfinite) {
  const std::string name = metadata_text(f, "model", path);
  const auto state = model_tensors(f);
  // A language model's vocabulary is its tokenizer's, and a text classifier
  // has as many outputs as its dataset had classes: read them off the
  // parameter the registry names (load_state_dict checks every shape after).
  int64_t outputs = 10;
  const std::string sized_by = models::model_info(name).outputs_parameter;
  if (!sized_by.empty()) {
    auto p = state.find(sized_by);
    MT_CHECK(p != state.end() && p->second.dim() >= 1 && p->second.size(0) > 0,
             "checkpoint '{}' holds a '{}' model without its '{}' (whose first dimension gives its outputs)", path,
             name, sized_by);
    outputs = p->second.size(0);
  }
  std::shared_ptr<nn::Module> model = models::make_model(name, outputs);
  // An INT8 checkpoint (`mixtape quantize`): its Linear layers get their INT8 slots first.
  Int8Layers int8;
  try {
    int8 = int8_layers(f, path);
    amp::int8::prepare_folded_batch_norms(*model, int8.folded);
    amp::int8::prepare_int8_layers(*model, int8.names, int8.smoothed);
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  const DType dtype = stored_parameter_dtype(f, state, *model, path);
  if (dtype != kF32) model->to(dtype, /*keep_norms_fp32=*/true);
  check_stored_dtypes(state, *model, path,
                      dtype == kF32 ? "a mixtape model keeps its parameters in f32"
                                    : fmt::format("a --master-weights model keeps its parameters in {}, its norm "
                                                  "layers in f32",
                                                  dtype));
  if (nonfinite == NonFiniteWeights::Refuse) {
    check_checkpoint_values(state, path, "refusing to load it (--allow-nonfinite loads it anyway, for a post-mortem)");
  }
  try {
    model->load_state_dict(state);
  } catch (const Error& e) {
    fail("checkpoint '{}' does not fit a '{}' model: {}", path, name, e.what());
  }
  try {
    amp::int8::check_int8_layers(*model);
    amp::int8::apply_int8_handoffs(*model, int8.handoffs);
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  model->to(device);
  return model;
}

}  // namespace

TrainConfig checkpoint_config(const SafetensorsFile& f, const std::string& path) {
  TrainConfig c;
  c.model = metadata_text(f, "model", path);
  c.precision.mode = parse_precision_choice(metadata_text(f, "precision", path));
  const nlohmann::json j = recorded_config(f, path);
  auto read = [&](const char* key, auto& field) {
    using Field = std::decay_t<decltype(field)>;
    if (!j.contains(key)) return;
    const nlohmann::json& v = j[key];
    const bool fits = std::is_same_v<Field, std::string> ? v.is_string()
                      : std::is_same_v<Field, bool>      ? v.is_boolean()
                                                         : v.is_number_integer();
    MT_CHECK(fits, "checkpoint '{}': config '{}' has the wrong type ({})", path, key, v.dump());
    field = v.get<Field>();
  };
  read("dataset", c.data.dataset);
  read("context", c.data.context);
  read("tokenizer", c.data.tokenizer);
  read("master_weights", c.precision.master_weights);
  return c;
}

std::shared_ptr<nn::Module> load_model_checkpoint(const SafetensorsFile& checkpoint, const std::string& path,
                                                  Device device, NonFiniteWeights nonfinite) {
  refuse_sharded(checkpoint, path, "loading the model");
  return model_from(checkpoint, path, device, nonfinite);
}

int64_t checkpoint_step(const SafetensorsFile& checkpoint, const std::string& path) {
  return metadata_int(checkpoint, "step", path, int64_t{0}, kMaxCheckpointStep);
}

}  // namespace mt::tools
