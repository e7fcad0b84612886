#include "tools/train/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <utility>

#include "autograd/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/anomaly.h"
#include "autograd/dtype_report.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/generator.h"
#include "core/graph.h"
#include "core/host_sync.h"
#include "core/safetensors.h"
#include "core/threads.h"
#if MT_WITH_CUDA
#include "core/device_info.h"
#endif
#include "distributed/ddp.h"
#include "distributed/zero.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "models/registry.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tools/data/loader.h"
#include "tools/data/text.h"
#include "tools/train/device_feed.h"
#include "tools/train/machine.h"
#include "tools/train/report.h"
#include "tools/train/tensorboard.h"

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

namespace {

using Clock = std::chrono::steady_clock;

DType low_precision_dtype(Precision p) { return p == Precision::Bf16 ? kBF16 : kF16; }

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

struct Splits {
  data::Dataset train, test;  // test: the held-out split (Brown's validation documents for text)
};

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

Splits load_data(const TrainConfig& c, const models::ModelInfo& model,
                 data::LabelCheck labels = data::LabelCheck::Refuse) {
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

// Weight decay on weight matrices and kernels only: biases and norm
// parameters (1-D) get none, the usual recipe.
std::vector<optim::ParamGroup> param_groups(const nn::Module& model, double lr, double weight_decay) {
  optim::ParamGroup decayed{{}, lr, weight_decay}, plain{{}, lr, 0.0};
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decayed : plain).params.push_back(p);
  std::vector<optim::ParamGroup> groups;
  if (!decayed.params.empty()) groups.push_back(decayed);
  if (!plain.params.empty()) groups.push_back(plain);
  return groups;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<optim::ParamGroup> groups,
                                                 const optim::PrecisionOptions& precision) {
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = c.lr}, precision);
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(groups, optim::SgdOptions{.lr = c.lr, .momentum = c.momentum}, precision);
  }
  fail("unknown optimizer '{}': expected adamw or sgd", c.optimizer);
}

// Per-element state tensors the optimizer keeps per parameter (the memory theory).
int optimizer_states(const TrainConfig& c) {
  if (c.optimizer == "adamw") return 2;
  return c.momentum > 0 ? 1 : 0;
}

std::unique_ptr<optim::LrScheduler> make_scheduler(const TrainConfig& c, optim::Optimizer& opt, int64_t total) {
  if (c.schedule == "cosine") return std::make_unique<optim::WarmupCosineLr>(opt, std::min(c.warmup, total), total);
  if (c.schedule == "constant") return std::make_unique<optim::ConstantLr>(opt, c.warmup);
  if (c.schedule == "step") return std::make_unique<optim::StepLr>(opt, std::max<int64_t>(total / 3, 1), 0.1, c.warmup);
  fail("unknown schedule '{}': expected cosine, constant or step", c.schedule);
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

// ---------------------------------------------------------------- checkpoints

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

void check_checkpoint_values(const SafetensorsFile& f, const std::string& path) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : f.tensors) {
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;
    const bool second_moment = name.size() >= 10 && name.compare(name.size() - 10, 10, "exp_avg_sq") == 0;
    const double low = second_moment ? 0.0 : -std::numeric_limits<double>::infinity();
    // f16/bf16 widen to f32 exactly; f32 and f64 are read where they are.
    const Tensor values = t.dtype() == kF64 ? t.contiguous() : t.to(kF32).contiguous();
    const bool ok = values.dtype() == kF64 ? all_finite_and_at_least(values.data<double>(), values.numel(), low)
                                           : all_finite_and_at_least(values.data<float>(), values.numel(), low);
    MT_CHECK(ok, "checkpoint '{}': '{}' holds {}; refusing to resume from it", path, name,
             second_moment ? "non-finite or negative second moments" : "non-finite values (NaN or inf)");
  }
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
    if (k.rfind("optimizer.", 0) != 0 && k.rfind("scaler.", 0) != 0) out[k] = v;
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::StateDict& optimizer_state, const amp::GradScaler& scaler,
                     const optim::LrScheduler& sched, const CheckpointPosition& pos) {
  std::map<std::string, Tensor> tensors = model.state_dict();
  for (const auto& [k, v] : optimizer_state) tensors["optimizer." + k] = v;
  for (const auto& [k, v] : scaler.state_dict()) tensors["scaler." + k] = v;
  const GeneratorState rng = default_generator().state();
  save_safetensors(path, tensors,
                   {{"format", "mixtape-checkpoint-1"},
                    {"config", config_json(c).dump()},
                    {"model", c.model},
                    {"precision", c.precision},
                    {"epoch", std::to_string(pos.epoch)},
                    {"batch_in_epoch", std::to_string(pos.batch_in_epoch)},
                    {"step", std::to_string(pos.step)},
                    {"scheduler_step", std::to_string(sched.last_step())},
                    {"rng_seed", std::to_string(rng.seed)},
                    {"rng_offset", std::to_string(rng.offset)},
                    {"world_size", std::to_string(dist::world().size())}});
}

CheckpointPosition load_checkpoint(const std::string& path, const TrainConfig& c, int64_t batches, nn::Module& model,
                                   const LoadOptimizerState& load_optimizer, amp::GradScaler& scaler,
                                   optim::LrScheduler& sched) {
  const SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("model");
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no model name in its metadata (not a mixtape checkpoint?)",
           path);
  MT_CHECK(it->second == c.model, "checkpoint '{}' holds a '{}' model but --model is '{}'", path, it->second, c.model);
  check_checkpoint_values(f, path);
  // load_state_dict would convert a tensor of another dtype silently, and the
  // run would then continue from different numbers than it saved.
  const auto stored = model_tensors(f);
  for (const auto& [name, t] : model.state_dict()) {
    auto at = stored.find(name);
    MT_CHECK(at == stored.end() || at->second.dtype() == t.dtype(),
             "checkpoint '{}': '{}' is stored as {} but this run keeps it in {} (a checkpoint of another --precision "
             "or --master-weights setting?)",
             path, name, at->second.dtype(), t.dtype());
  }
  try {
    model.load_state_dict(stored);
    load_optimizer(with_prefix(f, "optimizer.", true));
    scaler.load_state_dict(with_prefix(f, "scaler.", true));
  } catch (const Error& e) {
    fail("checkpoint '{}' does not match this run: {}", path, e.what());
  }
  default_generator().set_state(
      {metadata_int<uint64_t>(f, "rng_seed", path), metadata_int<uint64_t>(f, "rng_offset", path)});
  const CheckpointPosition pos{metadata_int(f, "epoch", path, int64_t{0}, c.epochs),
                               metadata_int(f, "batch_in_epoch", path, int64_t{0}, batches),
                               metadata_int(f, "step", path, int64_t{0})};
  sched.set_step(metadata_int(f, "scheduler_step", path, int64_t{0}, pos.step));
  // The position counts this world's batches per rank: another world size
  // would resume at another sample.
  const int64_t saved_world = f.metadata.count("world_size") ? metadata_int(f, "world_size", path, int64_t{1}) : 1;
  MT_CHECK(saved_world == dist::world().size(),
           "checkpoint '{}' was written by a run of {} rank(s); resume it with the same number (this run has {})", path,
           saved_world, dist::world().size());
  return pos;
}

namespace {

// ---------------------------------------------------------------- progress and metrics

std::string megabytes(int64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / (1 << 20)); }

// Training throughput in samples/s, evaluation and checkpoint writing
// excluded. It starts counting
// after the first optimizer step, which carries one-time start-up inside the
// loop (cuDNN and cuBLASLt handles and algorithm choice, the caching
// allocator's first blocks, the loader's first batch): on a GPU that is up to
// a second, enough to hide the steady speed of a short run. A run of a single
// step is measured whole.
class Throughput {
 public:
  Throughput() : start_(Clock::now()) {}
  void add_samples(int64_t n) { samples_ += n; }
  void step_done() {
    if (++steps_ != 1) return;
    warm_start_ = Clock::now();
    warm_samples_ = samples_;
  }
  void exclude_seconds(double s) { excluded_ += s; }
  double samples_per_second() const {
    const bool warm = steps_ > 1;
    const double seconds =
        std::chrono::duration<double>(Clock::now() - (warm ? warm_start_ : start_)).count() - excluded_;
    const int64_t counted = samples_ - (warm ? warm_samples_ : 0);
    return seconds > 0 ? static_cast<double>(counted) / seconds : 0.0;
  }
  double wall_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  Clock::time_point start_, warm_start_;
  int64_t samples_ = 0, warm_samples_ = 0, steps_ = 0;
  double excluded_ = 0;  // evaluation and checkpoints (always after the first step)
};

struct Reporter {
  std::FILE* out;
  bool progress;
  std::ofstream log;
  std::vector<nlohmann::json>* kept = nullptr;  // --report: every record, for the page

  Reporter(std::FILE* o, bool show, const std::string& path, std::vector<nlohmann::json>* keep)
      : out(o), progress(show && ::isatty(2)), kept(keep) {
    if (!path.empty()) {
      log.open(path, std::ios::trunc);
      MT_CHECK(log.good(), "cannot write the metrics log '{}'", path);
    }
  }

  // One JSON line of the metrics log (and of the report's records).
  void record(const nlohmann::json& line) {
    if (log.is_open()) log << line.dump() << '\n';
    if (kept != nullptr) kept->push_back(line);
  }

  void step(const nlohmann::json& m, int64_t epochs, int64_t batches) {
    record(m);
    const int64_t step = m["step"].get<int64_t>();
    const std::string line = fmt::format(
        "epoch {}/{} step {} batch {}/{} loss {:.4f} lr {:.2e} scale {:g} {:.0f} samples/s mem {} (peak {})",
        m["epoch"].get<int64_t>() + 1, epochs, step, m["batch"].get<int64_t>() + 1, batches, m["loss"].get<double>(),
        m["lr"].get<double>(), m["scale"].get<double>(), m["samples_per_s"].get<double>(),
        megabytes(m["memory_bytes"].get<int64_t>()), megabytes(m["peak_memory_bytes"].get<int64_t>()));
    if (progress) {
      std::fprintf(stderr, "\r%-120s", line.c_str());
      std::fflush(stderr);
    } else if (step % 100 == 0) {
      std::fprintf(out, "%s\n", line.c_str());
    }
  }

  void end_progress() {
    if (progress) std::fprintf(stderr, "\n");
  }
};

}  // namespace

// ---------------------------------------------------------------- evaluation

double Evaluation::perplexity() const { return std::exp(loss); }

namespace {

// The training loss: cross-entropy of the logits against the targets, over
// every position for a language model ([B, T, V] logits, [B, T] targets).
Tensor task_loss(const Tensor& logits, const Tensor& targets,
                 const CrossEntropyOptions& options = CrossEntropyOptions{}) {
  if (targets.dim() == 1) return cross_entropy(logits, targets, options);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), options);
}

}  // namespace

namespace {

struct EvaluationSums {
  double correct = 0, loss = 0, targets = 0;
  Evaluation mean() const { return targets > 0 ? Evaluation{correct / targets, loss / targets} : Evaluation{}; }
};

EvaluationSums evaluation_sums(nn::Module& model, const data::Dataset& data, Precision precision, Device device,
                               int64_t targets_per_batch) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t targets_per_sample = data.size() > 0 ? data.targets.numel() / data.size() : 1;
  const int64_t batch = std::max<int64_t>(1, targets_per_batch / targets_per_sample);
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int64_t n = std::min(batch, data.size() - begin);
    const Tensor x = data.inputs.narrow(0, begin, n).to(device);
    const Tensor targets = data.targets.narrow(0, begin, n).to(device);
    Tensor logits;
    {
      amp::Autocast guard(device, low_precision_dtype(precision), precision != Precision::Fp32);
      logits = model.forward(x);
    }
    loss_sum += task_loss(logits, targets, {.reduction = Reduction::Sum}).item<double>();
    correct += static_cast<int64_t>(sum(eq(argmax(logits, -1), targets).to(kI64)).item<double>());
  }
  model.train(was_training);
  return {static_cast<double>(correct), loss_sum, static_cast<double>(data.targets.numel())};
}

}  // namespace

Evaluation evaluate(nn::Module& model, const data::Dataset& data, Precision precision, Device device,
                    int64_t targets_per_batch) {
  return evaluation_sums(model, data, precision, device, targets_per_batch).mean();
}

// ---------------------------------------------------------------- training

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

std::pair<data::Dataset, data::Dataset> load_training_data(const TrainConfig& requested) {
  const TrainConfig c = resolve_defaults(requested, kCPU);
  Splits s = load_data(c, models::model_info(c.model), data::LabelCheck::Keep);
  return {std::move(s.train), std::move(s.test)};
}

namespace {

// What a step leaves on the device for its metrics.
struct StepTensors {
  Tensor loss, grad_norm, found_inf;
  Tensor nonfinite;  // --explain-skips: f32 [parameters], 1 where a gradient held inf/NaN
};

// --cuda-graph: each micro-batch is copied into a static input buffer; the
// step over them is captured once (after an eager warm-up step that creates
// the optimizer's state) and replayed from then on. A step with a short
// batch (an epoch's last) runs eagerly from the same buffers.
struct GraphedStep {
  std::unique_ptr<CudaGraph> graph;
  std::vector<Tensor> inputs, targets;  // one full-batch buffer per micro-batch
  std::vector<int64_t> sizes;           // the samples staged in each
  StepTensors outputs;                  // what the captured step writes
};

// Everything one `mixtape train` run holds, built in the order PyTorch's AMP
// recipe uses: data, model, loader, optimizer, schedule, scaler, checkpoint.
struct TrainingRun {
  TrainConfig c;
  Device device;
  Precision precision;
  models::ModelInfo model_info;
  int64_t tokens_per_sample = 1;  // language models: the window length
  Splits splits;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<optim::Optimizer> owned_opt;
  optim::Optimizer* opt = nullptr;  // owned_opt, or under --shard-optimizer the shard's
  std::unique_ptr<dist::ShardedOptimizer> zero;
  std::unique_ptr<optim::LrScheduler> scheduler;
  std::unique_ptr<amp::GradScaler> scaler;
  // Data parallel (`mpirun -np N mixtape train`): this process's rank, the
  // world size, and the model wrapped for gradient averaging (null in a world of one).
  int rank = 0, world = 1;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<BatchStager> stager;
  std::unique_ptr<StepMetrics> metrics;
  CheckpointPosition pos;
  int64_t batches = 0, steps_per_epoch = 0;
  TrainSummary summary;
  std::deque<double> recent_losses, recent_scales;

  // Host syncs counted over the steps after this process's first (the steady state).
  int64_t steps_this_run = 0, steady_syncs = 0, steady_steps = 0;

  // The micro-batches of the optimizer step in progress.
  int64_t micro = 0;
  Tensor accumulated_loss;  // on the device, detached

  std::unique_ptr<GraphedStep> graphed;  // --cuda-graph
  std::unique_ptr<ThreadTuner> tuner;    // --threads 0 on the CPU
  std::unique_ptr<TensorBoardWriter> tensorboard;
  MemoryLedger training_memory;     // the ledger at the highest training peak so far
  Clock::time_point last_step_end;  // when the last step ended, or the last pause

  // The debugging aids (tools/train/report.h, autograd/anomaly.h, autograd/dtype_report.h).
  bool dtype_report_done = false;
  std::vector<std::string> nonfinite_names;  // --explain-skips: the name of each flagged gradient
  int64_t skips_seen = 0;
  double last_finite_grad_norm = NAN;
};

// Work that is not a step (evaluation, checkpoints) has happened: neither the
// step times nor the thread tuner count it.
void restart_step_clock(TrainingRun& r) {
  r.last_step_end = Clock::now();
  if (r.tuner) r.tuner->pause();
}

// Keeps the ledger if this stretch of training peaked higher than any before;
// called before evaluating or saving, whose memory is not a training step's.
void note_training_memory(TrainingRun& r) {
  const MemoryLedger now = memory_ledger(r.device);
  if (now.total_peak >= r.training_memory.total_peak) r.training_memory = now;
}

// The kernels' thread count for the run (--threads), restored afterwards.
class RunThreads {
 public:
  RunThreads(TrainingRun& r) : previous_(num_threads()) {
    MT_CHECK(r.c.threads >= 0 && r.c.threads <= 4096, "train: --threads must be 0 (auto) to 4096, got {}", r.c.threads);
    if (r.c.threads > 0) {
      set_num_threads(static_cast<int>(r.c.threads));
    } else if (r.device.type == DeviceType::CPU) {
      r.tuner = std::make_unique<ThreadTuner>();
    }
  }
  ~RunThreads() { set_num_threads(previous_); }
  RunThreads(const RunThreads&) = delete;
  RunThreads& operator=(const RunThreads&) = delete;

 private:
  int previous_;
};

int visible_gpus() {
#if MT_WITH_CUDA
  return std::max(1, cuda::query_devices().count);
#else
  return 1;
#endif
}

// Fills `r` in place: the loader keeps a reference to r.splits.
void setup_run(TrainingRun& r, const TrainConfig& requested) {
  r.rank = dist::world().rank();
  r.world = dist::world().size();
  r.device = resolve_device(requested.device);
  // One GPU per rank, by its rank on the machine.
  if (r.world > 1 && r.device.is_cuda() && requested.device.find(':') == std::string::npos)
    r.device = Device{DeviceType::CUDA, dist::local_rank() % visible_gpus()};
  r.c = resolve_defaults(requested, r.device);
  if (!r.c.report.empty()) r.c.record_grad_norm = true;  // the page plots the gradient norm
  const TrainConfig& c = r.c;
  r.precision = parse_precision(c.precision);
  MT_CHECK(c.epochs > 0 && c.batch > 0 && c.grad_accum > 0, "train: epochs, batch and grad-accum must be positive");
  MT_CHECK(c.lr > 0 && std::isfinite(c.lr), "train: the learning rate must be positive, got {}", c.lr);
  MT_CHECK(c.clip >= 0 && std::isfinite(c.clip), "train: --clip must be a finite norm (0 = off), got {}", c.clip);
  MT_CHECK(c.init_scale > 0 && c.init_scale < 3.4e38, "train: --init-scale must be positive and finite in f32, got {}",
           c.init_scale);
  MT_CHECK(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "train: the weight decay must be finite and >= 0");
  // Checked before training, not when the first file is written.
  if (!c.save.empty()) check_output_folder("train: --save", c.save);
  if (!c.report.empty()) check_output_folder("train: --report", c.report);
  MT_CHECK(!c.master_weights || r.precision != Precision::Fp32,
           "train: --master-weights needs --precision fp16 or bf16");

  MT_CHECK(c.eval_every >= 0, "train: --eval-every must not be negative");
  r.model_info = models::model_info(c.model);
  r.splits = load_data(c, r.model_info);
  const bool language_model = r.model_info.task == models::ModelTask::LanguageModel;
  r.summary.language_model = language_model;
  if (r.model_info.task != models::ModelTask::ImageClassification) r.tokens_per_sample = r.splits.train.inputs.size(1);
  manual_seed(c.seed);
  r.model = models::make_model(c.model, r.splits.train.classes);
  MT_CHECK(!c.checkpoint_activations || r.model->enable_activation_checkpointing(),
           "train: --checkpoint-activations applies to cnn, resnet and the transformers (they have stages or blocks "
           "to recompute), not {}",
           c.model);
  r.model->to(r.device);
  if (c.master_weights) r.model->to(low_precision_dtype(r.precision), /*keep_norms_fp32=*/true);
  MT_CHECK(!c.cuda_graph || (r.world == 1 && !c.shard_optimizer && !c.ddp),
           "train: --cuda-graph is not supported with data parallel training (mpirun, --ddp) or --shard-optimizer yet");
  MT_CHECK(!(c.ddp && c.shard_optimizer),
           "train: --ddp and --shard-optimizer are two ways of data parallel training; choose one");
  // The gradients live in DDP's buckets: no copies in or out, and no second
  // copy of them in memory (the training loop keeps them only until the next step).
  if ((r.world > 1 || c.ddp) && !c.shard_optimizer) {
    r.ddp = std::make_unique<dist::DistributedDataParallel>(r.model, dist::DdpOptions{.gradient_as_bucket_view = true});
  }

  // Batches reach the device through the stager's own pinned buffers.
  r.loader = std::make_unique<data::DataLoader>(r.splits.train, data::LoaderOptions{.batch = c.batch,
                                                                                    .shuffle = true,
                                                                                    .augment = c.augment,
                                                                                    .seed = c.seed,
                                                                                    .prefetch = c.prefetch,
                                                                                    .shard_rank = r.rank,
                                                                                    .shard_count = r.world,
                                                                                    .drop_uneven = c.drop_uneven});
  r.stager = std::make_unique<BatchStager>(r.device, r.splits.train, c.batch);
  r.metrics = std::make_unique<StepMetrics>(r.device);
  MT_CHECK(r.splits.train.size() > 0 && r.splits.test.size() > 0,
           "train: the dataset has {} training and {} held-out samples; both must be non-empty", r.splits.train.size(),
           r.splits.test.size());
  r.batches = r.loader->batches_per_epoch();
  MT_CHECK(r.batches >= c.grad_accum,
           "train: --grad-accum {} needs {} batches per epoch, but {} samples make {} batches of {}: no optimizer step "
           "would run",
           c.grad_accum, c.grad_accum, r.splits.train.size(), r.batches, c.batch);
  r.steps_per_epoch = std::max<int64_t>(r.batches / c.grad_accum, 1);
  // The schedule spans --epochs; --steps only stops the run early (so a run
  // stopped by --steps and resumed without it keeps the same schedule).
  const int64_t total_steps = c.epochs * r.steps_per_epoch;

  MT_CHECK(!c.offload_optimizer || !r.device.is_cpu(),
           "train: --offload-optimizer moves optimizer state from the device to host memory; on the CPU it is "
           "there already (use --device sim or cuda)");
  MT_CHECK(!c.offload_optimizer || !c.cuda_graph,
           "train: --offload-optimizer is not supported with --cuda-graph yet (its copies are not captured)");
  const optim::PrecisionOptions precision{
      .master_weights = c.master_weights, .seed = c.seed, .offload_state = c.offload_optimizer};
  if (c.shard_optimizer) {
    r.zero = std::make_unique<dist::ShardedOptimizer>(
        param_groups(*r.model, c.lr, c.weight_decay),
        [&](std::vector<optim::ParamGroup> groups) { return make_optimizer(c, std::move(groups), precision); });
    r.opt = &r.zero->shard();
  } else {
    r.owned_opt = make_optimizer(c, param_groups(*r.model, c.lr, c.weight_decay), precision);
    r.opt = r.owned_opt.get();
  }
  r.scheduler = make_scheduler(c, *r.opt, total_steps);
  // The schedule counts on the device, so a skipped f16 step holds it back
  // without the host reading the skip flag.
  r.scheduler->use_device_counter(r.device);
  // f16 needs loss scaling; bf16 keeps f32's exponent range and needs none.
  // The collapse warning comes from the trainer's asynchronous metrics instead
  // of the scaler's own periodic read.
  r.scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{
      .init_scale = c.init_scale, .enabled = r.precision == Precision::Fp16, .collapse_check_interval = 0});
  if (r.zero && r.world > 1) {
    // Each rank checks its own shard's gradients: all of them skip if any found an inf.
    r.scaler->sync_found_inf([](const Tensor& found_inf) {
      dist::group_for(found_inf.device()).all_reduce(found_inf, dist::ReduceOp::Max)->wait();
    });
  }
  if (!c.resume.empty()) {
    const LoadOptimizerState load_optimizer = [&](const optim::StateDict& state) {
      if (r.zero) {
        r.zero->load_consolidated_state_dict(state);
      } else {
        r.opt->load_state_dict(state);
      }
    };
    r.pos = load_checkpoint(c.resume, c, r.batches, *r.model, load_optimizer, *r.scaler, *r.scheduler);
  }
  r.summary.parameters = r.model->parameter_count();
  MT_CHECK(c.explain_skips >= 0, "train: --explain-skips must be 0 (off) or a positive N, got {}", c.explain_skips);
  if (c.explain_skips > 0 && r.scaler->is_enabled()) {
    r.scaler->track_nonfinite_gradients(true);
    std::map<const TensorImpl*, std::string> names;
    for (const auto& [name, p] : r.model->named_parameters()) names[p.impl()] = name;
    for (const Tensor& p : r.opt->parameters()) {
      auto it = names.find(p.impl());
      r.nonfinite_names.push_back(it != names.end() ? it->second : fmt::format("a {} shard", p.shape_string()));
    }
  }
  MT_CHECK(!c.cuda_graph || !c.detect_anomaly,
           "train: --detect-anomaly reads every op's result back on the host, which a CUDA graph cannot capture; "
           "drop --cuda-graph while debugging");
  if (c.cuda_graph) {
    MT_CHECK(!r.device.is_cpu(), "train: --cuda-graph needs --device cuda or sim (the CPU has no graphs)");
    r.graphed = std::make_unique<GraphedStep>();
    r.graphed->graph = std::make_unique<CudaGraph>(r.device);
  }
}

// --dtype-report: the first forward's rows, kept for the log and the report and printed.
void keep_dtype_report(TrainingRun& r, const std::vector<autograd::DtypeReportRow>& rows) {
  r.dtype_report_done = true;
  nlohmann::json table = nlohmann::json::array();
  for (const autograd::DtypeReportRow& row : rows) {
    table.push_back({{"module", row.module},
                     {"op", row.op},
                     {"policy", row.policy},
                     {"inputs", row.inputs},
                     {"compute", row.compute},
                     {"output", row.output},
                     {"calls", row.calls},
                     {"flag", row.flag}});
  }
  r.summary.dtype_report = table;
}

// Forward and backward of one micro-batch already on the device; the loss stays there.
void forward_backward(TrainingRun& r, const Tensor& inputs, const Tensor& targets) {
  nn::Module& model = r.ddp ? static_cast<nn::Module&>(*r.ddp) : *r.model;
  Tensor loss;
  {
    // --dtype-report: the dtypes of the first forward (every later one repeats them).
    std::optional<autograd::DtypeRecorder> recorder;
    if (r.c.dtype_report && !r.dtype_report_done) recorder.emplace();
    amp::Autocast guard(r.device, low_precision_dtype(r.precision), r.precision != Precision::Fp32);
    loss = model.forward_loss(inputs, targets);  // defined where the model fuses its head and loss
    if (!loss.defined()) loss = task_loss(model.forward(inputs), targets);
    if (recorder) keep_dtype_report(r, recorder->rows());
  }
  const Tensor micro_loss = r.c.grad_accum > 1 ? div(loss, static_cast<double>(r.c.grad_accum)) : loss;
  {
    // Gradient accumulation: the ranks average once, on the last micro-batch.
    std::optional<dist::DistributedDataParallel::NoSync> local;
    if (r.ddp && r.micro + 1 < r.c.grad_accum) local.emplace(*r.ddp);
    r.scaler->scale(micro_loss).backward();
  }
  NoGradGuard no_grad;
  r.accumulated_loss =
      r.accumulated_loss.defined() ? add(r.accumulated_loss, micro_loss.detach()) : micro_loss.detach();
}

// Unscale, clip, step, update: every decision (skip, schedule) on the device,
// so the whole of it can be captured in a CUDA graph.
StepTensors device_step(TrainingRun& r) {
  if (r.zero) r.zero->reduce_gradients();  // ZeRO-1: this rank's shard of the mean gradient
  Tensor grad_norm;
  if (r.c.clip > 0) {
    r.scaler->unscale_(*r.opt);  // clip the true gradients, not the scaled ones
    grad_norm = r.zero ? r.zero->clip_grad_norm_(r.c.clip) : optim::clip_grad_norm_(r.model->parameters(), r.c.clip);
  } else if (r.c.record_grad_norm && !r.zero) {
    // Measured only: the scaled gradients' norm over the scale, nothing unscaled in place.
    grad_norm = optim::grad_norm(r.model->parameters(), r.scaler->is_enabled() ? r.scaler->scale_tensor() : Tensor());
  }
  const amp::StepOutcome outcome = r.scaler->step(*r.opt);
  Tensor nonfinite;
  if (r.c.explain_skips > 0 && r.scaler->is_enabled()) nonfinite = r.scaler->nonfinite_gradients(*r.opt).flags;
  r.scaler->update();
  r.scheduler->step_unless(outcome.found_inf());  // a skipped step must not advance the schedule
  if (r.zero) {
    r.zero->gather_parameters();
    r.zero->zero_grad();
  } else {
    r.opt->zero_grad();
  }
  Tensor loss = std::exchange(r.accumulated_loss, Tensor());
  if (r.world > 1) {  // the mean over the ranks' batches: what one process at the whole batch reports
    loss = loss.contiguous().clone();
    dist::group_for(r.device).all_reduce(loss)->wait();
    loss = div(loss, static_cast<double>(r.world));
  }
  return {loss, grad_norm, outcome.found_inf(), nonfinite};
}

// The host's part of a step: its position, and the asynchronous read-back of its values.
void finish_step(TrainingRun& r, const StepTensors& step, const data::Batch& last_batch, int64_t epoch) {
  ++r.pos.step;
  r.pos.epoch = epoch;
  r.pos.batch_in_epoch = last_batch.index + 1;
  r.metrics->stage({.step = r.pos.step, .epoch = epoch, .batch = last_batch.index}, step.loss, step.grad_norm,
                   step.found_inf, r.scaler->is_enabled() ? r.scaler->scale_tensor() : Tensor(),
                   r.scheduler->device_factor(), step.nonfinite);
}

void stage_micro_batch(TrainingRun& r, GraphedStep& g, const data::Batch& batch) {
  const BatchStager::OnDevice on_device = r.stager->upload(batch);
  const auto m = static_cast<size_t>(r.micro);
  auto full_batch = [&](const Tensor& t) {
    Shape shape = t.sizes();
    shape[0] = r.c.batch;
    const MemoryCategoryScope data_memory(MemoryCategory::Data);
    return empty(shape, t.dtype(), r.device);
  };
  if (g.inputs.size() <= m) {
    g.inputs.push_back(full_batch(on_device.inputs));
    g.targets.push_back(full_batch(on_device.targets));
    g.sizes.push_back(0);
  }
  const int64_t n = on_device.targets.size(0);
  copy_(g.inputs[m].narrow(0, 0, n), on_device.inputs);
  copy_(g.targets[m].narrow(0, 0, n), on_device.targets);
  g.sizes[m] = n;
}

StepTensors graphed_step(TrainingRun& r, GraphedStep& g) {
  const bool full = std::all_of(g.sizes.begin(), g.sizes.end(), [&](int64_t n) { return n == r.c.batch; });
  if (full && g.graph->captured()) {
    g.graph->replay();
    return g.outputs;
  }
  auto step = [&] {
    for (size_t m = 0; m < g.sizes.size(); ++m) {
      forward_backward(r, g.inputs[m].narrow(0, 0, g.sizes[m]), g.targets[m].narrow(0, 0, g.sizes[m]));
    }
    return device_step(r);
  };
  if (!full || r.steps_this_run == 0) return step();
  g.graph->capture([&] { g.outputs = step(); });
  g.graph->replay();
  return g.outputs;
}

[[noreturn]] void stop_on_non_finite(TrainingRun& r, const StepValues& v, Reporter& reporter) {
  reporter.end_progress();
  const std::string norm = std::isfinite(r.last_finite_grad_norm)
                               ? fmt::format(" Last finite gradient norm: {:.6g}.", r.last_finite_grad_norm)
                               : std::string(r.c.clip > 0 || r.c.record_grad_norm
                                                 ? " No finite gradient norm was measured."
                                                 : " (Gradient norms are measured with --clip or --report.)");
  const std::string& overflow = autograd::last_backward_overflow();
  const std::string anomaly =
      !r.c.detect_anomaly ? " Run with --detect-anomaly to name the op that produces the first NaN or inf."
      : overflow.empty()  ? " Anomaly mode saw no non-finite value in any op's forward or backward."
                          : fmt::format(" Anomaly mode: {}.", overflow);
  throw NonFiniteLoss(fmt::format(
      "the loss became {} at step {} (epoch {}). Recent loss scales: [{}]. Last finite losses: [{}].{}{} {}", v.loss,
      v.step, v.epoch + 1, fmt::join(r.recent_scales, ", "), fmt::join(r.recent_losses, ", "), norm, anomaly,
      r.c.save.empty()                    ? "No checkpoint was being written."
      : std::filesystem::exists(r.c.save) ? fmt::format("The last good checkpoint '{}' was kept.", r.c.save)
                                          : "No checkpoint had been written yet."));
}

// --explain-skips: at the first skip and every Nth after it, the parameters
// whose gradients held the inf/NaN, printed and logged.
void explain_skip(TrainingRun& r, const StepValues& v, Reporter& reporter) {
  if (r.c.explain_skips <= 0 || (r.skips_seen++ % r.c.explain_skips) != 0) return;
  std::vector<std::string> names;
  for (size_t i = 0; i < v.nonfinite.size(); ++i) {
    if (!v.nonfinite[i]) continue;
    names.push_back(i < r.nonfinite_names.size() ? r.nonfinite_names[i] : fmt::format("parameter #{}", i));
  }
  const std::string list = names.empty() ? "none of this rank's gradients (another rank's held it)"
                                         : fmt::format("{}", fmt::join(names, ", "));
  if (reporter.progress) std::fprintf(stderr, "\n");
  std::fprintf(reporter.out, "step %lld skipped (skip %lld): inf/NaN gradients in %s\n", static_cast<long long>(v.step),
               static_cast<long long>(r.skips_seen), list.c_str());
  reporter.record({{"skip", {{"step", v.step}, {"scale", v.scale}, {"parameters", names}}}});
}

// Reports the steps whose values have come back from the device.
// One step's numbers as TensorBoard scalars, and the memory ledger now.
void write_tensorboard_step(TensorBoardWriter& tb, const nlohmann::json& m, Device device) {
  const int64_t step = m["step"].get<int64_t>();
  for (const char* key : {"loss", "lr", "scale", "grad_norm", "samples_per_s"}) {
    if (m.contains(key)) tb.scalar(std::string("train/") + key, m[key].get<double>(), step);
  }
  const MemoryLedger ledger = memory_ledger(device);
  for (const MemoryCategory category : all_memory_categories()) {
    tb.scalar(std::string("memory/") + memory_category_name(category), static_cast<double>(ledger[category]), step);
  }
}

void report_steps(TrainingRun& r, const std::vector<StepValues>& arrived, Reporter& reporter,
                  const Throughput& throughput) {
  for (const StepValues& v : arrived) {
    if (!std::isfinite(v.loss)) stop_on_non_finite(r, v, reporter);
    if (v.skipped) {
      ++r.summary.skipped_steps;
      explain_skip(r, v, reporter);
    }
    if (std::isfinite(v.grad_norm)) r.last_finite_grad_norm = v.grad_norm;
    if (r.scaler->is_enabled() && v.scale < 1.0 && (r.recent_scales.empty() || r.recent_scales.back() >= 1.0)) {
      spdlog::warn(
          "GradScaler: the loss scale fell to {:g} (< 1) at step {}: gradients overflow f16 even unscaled. Try "
          "bf16 autocast (no scaler needed) or look for the op producing inf.",
          v.scale, v.step);
    }
    r.recent_losses.push_back(v.loss);
    r.recent_scales.push_back(v.scale);
    if (r.recent_losses.size() > 8) r.recent_losses.pop_front();
    if (r.recent_scales.size() > 8) r.recent_scales.pop_front();
    r.summary.losses.push_back(v.loss);
    const AllocatorStats mem = memory_stats(r.device);
    nlohmann::json m = {{"step", v.step},
                        {"epoch", v.epoch},
                        {"batch", v.batch},
                        {"loss", v.loss},
                        {"lr", r.scheduler->base_lr() * v.lr_factor},
                        {"scale", v.scale},
                        {"samples_per_s", throughput.samples_per_second()},
                        {"memory_bytes", mem.current_bytes},
                        {"peak_memory_bytes", mem.peak_bytes},
                        {"skipped", v.skipped}};
    if (std::isfinite(v.grad_norm)) m["grad_norm"] = v.grad_norm;
    if (r.tensorboard) write_tensorboard_step(*r.tensorboard, m, r.device);
    reporter.step(m, r.c.epochs, r.batches);
  }
}

// Each rank evaluates its share of the held-out split (every sample once)
// with rank 0's buffers, and the sums are added up over the ranks.
Evaluation evaluate_across_ranks(TrainingRun& r) {
  std::vector<std::shared_ptr<dist::Work>> buffers;
  for (auto& [name, b] : r.model->named_buffers()) buffers.push_back(dist::group_for(r.device).broadcast(b, 0));
  for (auto& w : buffers) w->wait();
  const data::Dataset& test = r.splits.test;
  const int64_t n = test.size(), begin = n * r.rank / r.world, end = n * (r.rank + 1) / r.world;
  data::Dataset mine = test;
  mine.inputs = test.inputs.narrow(0, begin, end - begin);
  mine.targets = test.targets.narrow(0, begin, end - begin);
  const EvaluationSums local =
      end > begin ? evaluation_sums(*r.model, mine, r.precision, r.device, 32768) : EvaluationSums{};
  Tensor sums = from_vector(std::vector<double>{local.correct, local.loss, local.targets}, {3}, kF64);
  dist::world().all_reduce(sums)->wait();
  const std::vector<double> total = sums.to_vector();
  return EvaluationSums{total[0], total[1], total[2]}.mean();
}

// Evaluates on the held-out split, prints and logs the result, and keeps it
// in the summary; its time is not training time.
void evaluate_and_report(TrainingRun& r, const std::string& when, Reporter& reporter, Throughput& throughput) {
  note_training_memory(r);
  const auto start = Clock::now();
  const Evaluation e =
      r.world > 1 ? evaluate_across_ranks(r) : evaluate(*r.model, r.splits.test, r.precision, r.device);
  nlohmann::json record = {{"step", r.pos.step}, {"loss", e.loss}};
  if (r.summary.language_model) {
    r.summary.validation_losses.push_back(e.loss);
    r.summary.validation_loss = e.loss;
    r.summary.perplexity = e.perplexity();
    record["perplexity"] = e.perplexity();
    std::fprintf(reporter.out, "%s: validation loss %.4f nats/token (perplexity %.2f)\n", when.c_str(), e.loss,
                 e.perplexity());
  } else {
    r.summary.epoch_accuracies.push_back(e.accuracy);
    r.summary.test_accuracy = e.accuracy;
    record["accuracy"] = e.accuracy;
    std::fprintf(reporter.out, "%s: test accuracy %.2f%%\n", when.c_str(), 100.0 * e.accuracy);
  }
  reporter.record(nlohmann::json{{"eval", record}});
  throughput.exclude_seconds(std::chrono::duration<double>(Clock::now() - start).count());
  restart_step_clock(r);
  reset_memory_ledger_peak(r.device);
}

// Trains until the epoch ends or the step limit is reached; true at the limit.
bool train_epoch(TrainingRun& r, int64_t epoch, Reporter& reporter, Throughput& throughput) {
  r.loader->start_epoch(epoch, epoch == r.pos.epoch ? r.pos.batch_in_epoch : 0);
  r.micro = 0;
  r.accumulated_loss = Tensor();
  // Micro-batches that cannot fill a whole step at the epoch's end are left
  // out, so their gradients never leak into the next epoch's first step.
  const int64_t batches_used = r.steps_per_epoch * r.c.grad_accum;
  while (auto batch = r.loader->next()) {
    if (batch->index >= batches_used) break;
    const int64_t syncs_before = host_sync_count();
    if (r.graphed) {
      stage_micro_batch(r, *r.graphed, *batch);
    } else {
      const BatchStager::OnDevice on_device = r.stager->upload(*batch);
      forward_backward(r, on_device.inputs, on_device.targets);
    }
    throughput.add_samples(batch->targets.size(0) * r.world);  // every rank trains a batch of this size
    if (++r.micro < r.c.grad_accum) {
      if (r.steps_this_run > 0) r.steady_syncs += host_sync_count() - syncs_before;
      continue;
    }
    r.micro = 0;
    finish_step(r, r.graphed ? graphed_step(r, *r.graphed) : device_step(r), *batch, epoch);
    throughput.step_done();
    const Clock::time_point now = Clock::now();
    r.summary.step_seconds.push_back(std::chrono::duration<double>(now - r.last_step_end).count());
    r.last_step_end = now;
    if (r.tuner) r.tuner->step_finished();
    report_steps(r, r.metrics->poll(), reporter, throughput);
    if (++r.steps_this_run > 1) {  // the first step carries one-time set-up
      r.steady_syncs += host_sync_count() - syncs_before;
      ++r.steady_steps;
    }
    if (r.c.max_steps > 0 && r.pos.step >= r.c.max_steps) return true;
    const bool epoch_ends = batch->index + 1 == batches_used;  // evaluated at the epoch's end anyway
    if (r.c.eval_every > 0 && r.pos.step % r.c.eval_every == 0 && !epoch_ends) {
      report_steps(r, r.metrics->flush(), reporter, throughput);  // a NaN loss stops before an evaluation
      reporter.end_progress();
      evaluate_and_report(r, fmt::format("step {}", r.pos.step), reporter, throughput);
    }
  }
  return false;
}

// The --dtype-report table: one line per module, op and dtypes, flagged rows marked.
void print_dtype_report(std::FILE* out, const nlohmann::json& rows) {
  std::fprintf(
      out, "autocast dtype report (first step's forward): module | op | policy | inputs -> ran in -> output | calls\n");
  int64_t flagged = 0;
  for (const nlohmann::json& row : rows) {
    const std::string flag = row["flag"].get<std::string>();
    flagged += flag.empty() ? 0 : 1;
    std::fprintf(out, "  %s %-28s %-22s %-16s %-28s -> %-4s -> %-4s x%lld%s%s\n", flag.empty() ? " " : "!",
                 row["module"].get<std::string>().c_str(), row["op"].get<std::string>().c_str(),
                 row["policy"].get<std::string>().c_str(), row["inputs"].get<std::string>().c_str(),
                 row["compute"].get<std::string>().c_str(), row["output"].get<std::string>().c_str(),
                 static_cast<long long>(row["calls"].get<int64_t>()), flag.empty() ? "" : "  ! ", flag.c_str());
  }
  std::fprintf(out, "%lld row(s) flagged: f32 activations under autocast (each costs f32 memory when saved)\n",
               static_cast<long long>(flagged));
}

void write_summary(TrainingRun& r, std::FILE* out, Reporter& reporter) {
  TrainSummary& summary = r.summary;
  summary.peak_memory_bytes = memory_stats(r.device).peak_bytes;
  summary.steps = r.pos.step;
  summary.final_scale = r.scaler->get_scale();
  summary.threads = num_threads();
  note_training_memory(r);
  summary.memory_ledger = r.training_memory;
  summary.memory_theory =
      memory_theory(*r.model, r.c.master_weights, optimizer_states(r.c),
                    {.world = r.world, .ddp = r.ddp != nullptr, .shard_optimizer = r.c.shard_optimizer});
  summary.host_syncs_per_step =
      r.steady_steps > 0 ? static_cast<double>(r.steady_syncs) / static_cast<double>(r.steady_steps) : 0.0;
  const std::string result =
      summary.language_model
          ? fmt::format("validation loss {:.4f} (perplexity {:.2f})", summary.validation_loss, summary.perplexity)
          : fmt::format("test accuracy {:.2f}%", 100.0 * summary.test_accuracy);
  const std::string speed = summary.language_model ? fmt::format("{:.0f} tokens/s", summary.tokens_per_second)
                                                   : fmt::format("{:.0f} samples/s", summary.samples_per_second);
  const std::string threads = r.device.type == DeviceType::CPU
                                  ? fmt::format(", {} CPU thread{}{}", summary.threads, summary.threads == 1 ? "" : "s",
                                                r.tuner ? " (timed)" : "")
                                  : std::string();
  std::fprintf(out, "%s  |  %lld steps in %.1f s, %s, peak memory %s, skipped steps %lld%s\n", result.c_str(),
               static_cast<long long>(summary.steps), summary.seconds, speed.c_str(),
               megabytes(summary.peak_memory_bytes).c_str(), static_cast<long long>(summary.skipped_steps),
               threads.c_str());
  if (r.c.memory) print_memory_report(out, summary.memory_ledger, summary.memory_theory, r.device.str());
  if (r.c.dtype_report && summary.dtype_report.is_array()) {
    print_dtype_report(out, summary.dtype_report);
    reporter.record({{"dtype_report", summary.dtype_report}});
  }
  nlohmann::json record = {{"seconds", summary.seconds},
                           {"samples_per_s", summary.samples_per_second},
                           {"peak_memory_bytes", summary.peak_memory_bytes},
                           {"training_peak_bytes", summary.training_peak_bytes()},
                           {"dataset_bytes", summary.dataset_bytes},
                           {"steps", summary.steps},
                           {"skipped_steps", summary.skipped_steps},
                           {"final_scale", summary.final_scale},
                           {"host_syncs_per_step", summary.host_syncs_per_step},
                           {"threads", summary.threads},
                           {"memory_ledger", memory_report_json(summary.memory_ledger, summary.memory_theory)},
                           {"parameters", summary.parameters},
                           {"config", config_json(r.c)}};
  if (summary.language_model) {
    record["validation_loss"] = summary.validation_loss;
    record["perplexity"] = summary.perplexity;
    record["validation_losses"] = summary.validation_losses;
    record["tokens_per_s"] = summary.tokens_per_second;
  } else {
    record["test_accuracy"] = summary.test_accuracy;
    record["epoch_accuracies"] = summary.epoch_accuracies;
  }
  record["device"] = r.device.str();
  if (!r.c.command.empty()) record["command"] = r.c.command;
  reporter.record(nlohmann::json{{"summary", record}});
}

}  // namespace

namespace {

// Ranks other than 0 write their report lines nowhere.
class QuietUnlessRankZero {
 public:
  QuietUnlessRankZero(int rank, std::FILE* out) : out_(out) {
    if (rank == 0) return;
    null_ = std::fopen("/dev/null", "w");
    MT_CHECK(null_ != nullptr, "train: cannot open /dev/null for rank {}'s output", rank);
    out_ = null_;
  }
  ~QuietUnlessRankZero() {
    if (null_ != nullptr) std::fclose(null_);
  }
  QuietUnlessRankZero(const QuietUnlessRankZero&) = delete;
  QuietUnlessRankZero& operator=(const QuietUnlessRankZero&) = delete;
  std::FILE* out() const { return out_; }

 private:
  std::FILE* out_;
  std::FILE* null_ = nullptr;
};

// --report: the page of this run, from the records it logged.
void write_run_report(const TrainingRun& r) {
  const RunRecord run = run_from_records(r.summary.records, r.c.precision);
  ReportPage page;
  page.title = fmt::format("mixtape train: {} in {} on {}", r.c.model, r.c.precision, r.device.str());
  page.runs = {run};
  page.machine = machine_json(r.device);
  page.commit = source_commit();
  write_report(r.c.report, page);
  std::fprintf(stderr, "report written to %s\n", r.c.report.c_str());
}

// Writes the report of what was logged when training ends in an exception
// (a NaN loss, an anomaly), so the curves up to the failure can be seen.
class ReportOnError {
 public:
  ReportOnError(const TrainingRun& r, const Reporter& reporter) : r_(r), reporter_(reporter) {}
  ~ReportOnError() {
    if (std::uncaught_exceptions() == 0 || r_.c.report.empty() || reporter_.kept == nullptr) return;
    try {
      write_run_report(r_);
    } catch (const std::exception&) {  // the first error is the one to report
    }
  }
  ReportOnError(const ReportOnError&) = delete;
  ReportOnError& operator=(const ReportOnError&) = delete;

 private:
  const TrainingRun& r_;
  const Reporter& reporter_;
};

// The CPU allocator's cap for TrainConfig::memory_budget, lifted afterwards.
class CpuMemoryCap {
 public:
  explicit CpuMemoryCap(int64_t bytes) : previous_(bytes > 0 ? set_cpu_memory_limit(bytes) : -1) {}
  ~CpuMemoryCap() {
    if (previous_ >= 0) set_cpu_memory_limit(previous_);
  }
  CpuMemoryCap(const CpuMemoryCap&) = delete;
  CpuMemoryCap& operator=(const CpuMemoryCap&) = delete;

 private:
  int64_t previous_;
};

}  // namespace

TrainSummary train(const TrainConfig& requested, std::FILE* out) {
  MT_CHECK(requested.memory_budget >= 0, "train: the memory budget must not be negative");
  const int64_t cpu_bytes_before = memory_stats(kCPU).current_bytes;
  const int64_t device_tensors_before = memory_ledger(resolve_device(requested.device)).total_current;
  TrainingRun r;
  setup_run(r, requested);
  r.summary.bytes_before = device_tensors_before;
  const TrainConfig& c = r.c;
  // Rank 0 alone prints, logs and writes checkpoints and TensorBoard files.
  const QuietUnlessRankZero quiet(r.rank, out);
  out = quiet.out();
  Reporter reporter(out, c.progress && r.rank == 0, r.rank == 0 ? c.log : std::string(),
                    (c.keep_records || !c.report.empty()) && r.rank == 0 ? &r.summary.records : nullptr);
  const AnomalyMode anomaly(c.detect_anomaly);
  const RunThreads threads(r);
  if (!c.tensorboard.empty() && r.rank == 0) r.tensorboard = std::make_unique<TensorBoardWriter>(c.tensorboard);
  const std::string ranks = r.world > 1 || r.ddp
                                ? fmt::format(" per rank x {} rank{} ({}{}{})", r.world, r.world > 1 ? "s" : "",
                                              dist::group_for(r.device).backend(), r.ddp ? ", DDP" : "",
                                              c.shard_optimizer ? ", optimizer state sharded" : "")
                                : std::string();
  std::fprintf(out, "training %s (%lld parameters) on %s in %s%s, %s, batch %lld x %lld%s, %lld steps per epoch\n",
               c.model.c_str(), static_cast<long long>(r.summary.parameters), r.device.str().c_str(),
               c.precision.c_str(), c.master_weights ? " with f32 master weights" : "", c.optimizer.c_str(),
               static_cast<long long>(c.batch), static_cast<long long>(c.grad_accum), ranks.c_str(),
               static_cast<long long>(r.steps_per_epoch));

  allocator_for(r.device).reset_peak();
  reset_memory_ledger_peak(r.device);
  r.summary.training_samples = r.splits.train.size();
  if (r.device.is_cpu()) {
    for (const data::Dataset* d : {&r.splits.train, &r.splits.test}) {
      for (const Tensor* t : {&d->inputs, &d->targets})
        r.summary.dataset_bytes += static_cast<int64_t>(t->storage()->nbytes());
    }
  }
  const CpuMemoryCap cap(
      r.device.is_cpu() && c.memory_budget > 0 ? cpu_bytes_before + r.summary.dataset_bytes + c.memory_budget : 0);
  Throughput throughput;
  restart_step_clock(r);
  bool stop = false;
  // A run that stops on a NaN loss or an anomaly still gets its page.
  const ReportOnError report_on_error(r, reporter);
  for (int64_t epoch = r.pos.epoch; epoch < c.epochs && !stop; ++epoch) {
    stop = train_epoch(r, epoch, reporter, throughput);
    report_steps(r, r.metrics->flush(), reporter, throughput);  // a NaN loss stops here, before any checkpoint
    reporter.end_progress();
    if (!stop) {
      r.pos.epoch = epoch + 1;
      r.pos.batch_in_epoch = 0;
    }
    evaluate_and_report(r, fmt::format("epoch {}", epoch + 1), reporter, throughput);
    const auto saving = Clock::now();
    note_training_memory(r);
    if (!c.save.empty()) {
      // Consolidating ZeRO's shards is a collective: every rank takes part, rank 0 writes.
      const optim::StateDict optimizer_state = r.zero ? r.zero->consolidated_state_dict() : r.opt->state_dict();
      if (r.rank == 0) save_checkpoint(c.save, c, *r.model, optimizer_state, *r.scaler, *r.scheduler, r.pos);
    }
    throughput.exclude_seconds(std::chrono::duration<double>(Clock::now() - saving).count());
    restart_step_clock(r);
    reset_memory_ledger_peak(r.device);
  }
  r.summary.seconds = throughput.wall_seconds();
  r.summary.samples_per_second = throughput.samples_per_second();
  r.summary.tokens_per_second = r.summary.samples_per_second * static_cast<double>(r.tokens_per_sample);
  write_summary(r, out, reporter);
  if (r.tensorboard) r.tensorboard->flush();
  if (!c.report.empty() && r.rank == 0) write_run_report(r);
  return r.summary;
}

namespace {

std::string metadata_text(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no '{}' in its metadata (not a mixtape checkpoint?)", path,
           key);
  return it->second;
}

// The model a checkpoint names, in the dtype its parameters were stored in
// (a master-weight run stores f16/bf16 parameters).
std::shared_ptr<nn::Module> model_from(const SafetensorsFile& f, const std::string& path, Device device) {
  const std::string name = metadata_text(f, "model", path);
  const auto state = model_tensors(f);
  // A text classifier has as many outputs as its dataset had classes: read them off its head.
  int64_t classes = 10;
  if (models::model_info(name).task == models::ModelTask::TextClassification) {
    auto head = state.find("classifier.bias");
    MT_CHECK(head != state.end() && head->second.dim() == 1 && head->second.size(0) > 0,
             "checkpoint '{}' holds a '{}' model without a classifier.bias [classes]", path, name);
    classes = head->second.size(0);
  }
  std::shared_ptr<nn::Module> model = models::make_model(name, classes);
  for (const auto& [param_name, p] : model->named_parameters()) {
    auto it = state.find(param_name);
    if (it != state.end() && it->second.dtype() != p.dtype()) {
      model->to(it->second.dtype());
      break;
    }
  }
  try {
    model->load_state_dict(state);
  } catch (const Error& e) {
    fail("checkpoint '{}' does not fit a '{}' model: {}", path, name, e.what());
  }
  model->to(device);
  return model;
}

}  // namespace

TrainConfig checkpoint_config(const SafetensorsFile& f, const std::string& path) {
  TrainConfig c;
  c.model = metadata_text(f, "model", path);
  c.precision = metadata_text(f, "precision", path);
  auto it = f.metadata.find("config");
  if (it == f.metadata.end()) return c;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  MT_CHECK(j.is_object(), "checkpoint '{}': its 'config' metadata is not a JSON object", path);
  auto read = [&](const char* key, auto& field) {
    using Field = std::decay_t<decltype(field)>;
    if (!j.contains(key)) return;
    const nlohmann::json& v = j[key];
    const bool fits = std::is_same_v<Field, std::string> ? v.is_string() : v.is_number_integer();
    MT_CHECK(fits, "checkpoint '{}': config '{}' has the wrong type ({})", path, key, v.dump());
    field = v.get<Field>();
  };
  read("dataset", c.dataset);
  read("context", c.context);
  return c;
}

std::shared_ptr<nn::Module> load_model_checkpoint(const SafetensorsFile& checkpoint, const std::string& path,
                                                  Device device) {
  return model_from(checkpoint, path, device);
}

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device_text,
                               int64_t test_limit, bool half) {
  const SafetensorsFile f = load_safetensors(path);
  const Device device = resolve_device(device_text);
  TrainConfig c = resolve_defaults(checkpoint_config(f, path), device);
  c.data = data_dir;
  MT_CHECK(test_limit >= 0, "eval: --test-limit must not be negative, got {}", test_limit);
  c.test_limit = test_limit;
  const models::ModelInfo info = models::model_info(c.model);
  std::shared_ptr<nn::Module> model = model_from(f, path, device);
  const Splits splits = load_data(c, info);
  EvalResult r;
  r.evaluation = evaluate(*model, splits.test, parse_precision(c.precision), device);
  r.language_model = info.task == models::ModelTask::LanguageModel;
  r.model = c.model;
  r.precision = c.precision;
  r.dataset = c.dataset;
  r.step = metadata_int(f, "step", path);
  if (half) {
    const Precision low = device.is_cpu() ? Precision::Bf16 : Precision::Fp16;
    r.half = true;
    r.half_dtype = low == Precision::Bf16 ? "bf16" : "fp16";
    std::shared_ptr<nn::Module> f32_model = model_from(f, path, device);
    f32_model->to(kF32, /*keep_norms_fp32=*/true);  // a master-weights checkpoint stores f16/bf16
    r.autocast_evaluation = evaluate(*f32_model, splits.test, low, device);
    model.reset();
    r.parameter_bytes = memory_ledger(device)[MemoryCategory::Parameters];
    f32_model->to(low_precision_dtype(low), /*keep_norms_fp32=*/true);
    r.half_parameter_bytes = memory_ledger(device)[MemoryCategory::Parameters];
    r.half_evaluation = evaluate(*f32_model, splits.test, low, device);
  }
  return r;
}

}  // namespace mt::tools
