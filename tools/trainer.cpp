#include "tools/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/generator.h"
#include "core/graph.h"
#include "core/host_sync.h"
#include "core/safetensors.h"
#include "models/registry.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tools/data/loader.h"
#include "tools/device_feed.h"

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
  out.images = d.images.narrow(0, 0, n).contiguous();
  out.labels = d.labels.narrow(0, 0, n).contiguous();
  return out;
}

struct Splits {
  data::Dataset train, test;
};

Splits load_data(const TrainConfig& c) {
  Splits s;
  if (c.dataset == "synthetic") {
    s.train = data::synthetic_images(c.train_limit > 0 ? c.train_limit : 4096, 10, 28, 28, 1);
    s.test = data::synthetic_images(c.test_limit > 0 ? c.test_limit : 1024, 10, 28, 28, 2);
    return s;
  }
  MT_CHECK(c.dataset == "fashion-mnist", "unknown dataset '{}': expected fashion-mnist or synthetic", c.dataset);
  data::FashionMnist f = data::load_fashion_mnist(c.data);
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

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const nn::Module& model,
                                                 const optim::PrecisionOptions& precision) {
  auto groups = param_groups(model, c.lr, c.weight_decay);
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = c.lr}, precision);
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(groups, optim::SgdOptions{.lr = c.lr, .momentum = c.momentum}, precision);
  }
  fail("unknown optimizer '{}': expected adamw or sgd", c.optimizer);
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
          {"seed", c.seed},
          {"dataset", c.dataset},
          {"augment", c.augment}};
}

// ---------------------------------------------------------------- checkpoints

struct Position {
  int64_t epoch = 0;           // epoch in progress
  int64_t batch_in_epoch = 0;  // next batch to train on
  int64_t step = 0;            // optimizer steps done
};

void save_checkpoint(const std::string& path, const TrainConfig& c, const nn::Module& model,
                     const optim::Optimizer& opt, const amp::GradScaler& scaler, const optim::LrScheduler& sched,
                     const Position& pos) {
  std::map<std::string, Tensor> tensors = model.state_dict();
  for (const auto& [k, v] : opt.state_dict()) tensors["optimizer." + k] = v;
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
                    {"rng_offset", std::to_string(rng.offset)}});
}

int64_t metadata_int(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no '{}' in its metadata (not a mixtape checkpoint?)", path,
           key);
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    fail("checkpoint '{}': metadata '{}' = '{}' is not a number", path, key, it->second);
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

Position load_checkpoint(const std::string& path, const TrainConfig& c, nn::Module& model, optim::Optimizer& opt,
                         amp::GradScaler& scaler, optim::LrScheduler& sched) {
  const SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("model");
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no model name in its metadata (not a mixtape checkpoint?)",
           path);
  MT_CHECK(it->second == c.model, "checkpoint '{}' holds a '{}' model but --model is '{}'", path, it->second, c.model);
  try {
    model.load_state_dict(model_tensors(f));
    opt.load_state_dict(with_prefix(f, "optimizer.", true));
    scaler.load_state_dict(with_prefix(f, "scaler.", true));
  } catch (const Error& e) {
    fail("checkpoint '{}' does not match this run: {}", path, e.what());
  }
  default_generator().set_state({static_cast<uint64_t>(metadata_int(f, "rng_seed", path)),
                                 static_cast<uint64_t>(metadata_int(f, "rng_offset", path))});
  sched.set_step(metadata_int(f, "scheduler_step", path));
  return {metadata_int(f, "epoch", path), metadata_int(f, "batch_in_epoch", path), metadata_int(f, "step", path)};
}

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

  Reporter(std::FILE* o, bool show, const std::string& path) : out(o), progress(show && ::isatty(2)) {
    if (!path.empty()) {
      log.open(path, std::ios::trunc);
      MT_CHECK(log.good(), "cannot write the metrics log '{}'", path);
    }
  }

  void step(const nlohmann::json& m, int64_t epochs, int64_t batches) {
    if (log.is_open()) log << m.dump() << '\n';
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

double evaluate(nn::Module& model, const data::Dataset& data, Precision precision, Device device, int64_t batch) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int64_t n = std::min(batch, data.size() - begin);
    const Tensor x = data.images.narrow(0, begin, n).to(device);
    Tensor logits;
    {
      amp::Autocast guard(device, low_precision_dtype(precision), precision != Precision::Fp32);
      logits = model.forward(x);
    }
    const Tensor hits = eq(argmax(logits, 1).to(kCPU), data.labels.narrow(0, begin, n));
    correct += static_cast<int64_t>(sum(hits.to(kI64)).item<double>());
  }
  model.train(was_training);
  return data.size() > 0 ? static_cast<double>(correct) / static_cast<double>(data.size()) : 0.0;
}

// ---------------------------------------------------------------- training

// Resolves the "auto" choices against the device the run will use.
TrainConfig resolve_defaults(const TrainConfig& requested, Device device) {
  TrainConfig c = requested;
  if (c.model == "auto") c.model = device.is_cpu() ? "mlp" : "cnn";
  if (c.precision == "auto") c.precision = device.is_cpu() ? "bf16" : "fp16";  // autocast's default dtypes
  return c;
}

namespace {

// What a step leaves on the device for its metrics.
struct StepTensors {
  Tensor loss, grad_norm, found_inf;
};

// --cuda-graph: each micro-batch is copied into a static input buffer; the
// step over them is captured once (after an eager warm-up step that creates
// the optimizer's state) and replayed from then on. A step with a short
// batch (an epoch's last) runs eagerly from the same buffers.
struct GraphedStep {
  std::unique_ptr<CudaGraph> graph;
  std::vector<Tensor> images, labels;  // one full-batch buffer per micro-batch
  std::vector<int64_t> sizes;          // the samples staged in each
  StepTensors outputs;                 // what the captured step writes
};

// Everything one `mixtape train` run holds, built in the order PyTorch's AMP
// recipe uses: data, model, loader, optimizer, schedule, scaler, checkpoint.
struct TrainingRun {
  TrainConfig c;
  Device device;
  Precision precision;
  Splits splits;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LrScheduler> scheduler;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<BatchStager> stager;
  std::unique_ptr<StepMetrics> metrics;
  Position pos;
  int64_t batches = 0, steps_per_epoch = 0;
  TrainSummary summary;
  std::deque<double> recent_losses, recent_scales;

  // Host syncs counted over the steps after this process's first (the steady state).
  int64_t steps_this_run = 0, steady_syncs = 0, steady_steps = 0;

  // The micro-batches of the optimizer step in progress.
  int64_t micro = 0;
  Tensor accumulated_loss;  // on the device, detached

  std::unique_ptr<GraphedStep> graphed;  // --cuda-graph
};

// Fills `r` in place: the loader keeps a reference to r.splits.
void setup_run(TrainingRun& r, const TrainConfig& requested) {
  r.device = resolve_device(requested.device);
  r.c = resolve_defaults(requested, r.device);
  const TrainConfig& c = r.c;
  r.precision = parse_precision(c.precision);
  MT_CHECK(c.epochs > 0 && c.batch > 0 && c.grad_accum > 0, "train: epochs, batch and grad-accum must be positive");
  MT_CHECK(c.lr > 0 && std::isfinite(c.lr), "train: the learning rate must be positive, got {}", c.lr);
  MT_CHECK(!c.master_weights || r.precision != Precision::Fp32,
           "train: --master-weights needs --precision fp16 or bf16");

  r.splits = load_data(c);
  manual_seed(c.seed);
  r.model = models::make_model(c.model, r.splits.train.classes);
  r.model->to(r.device);
  if (c.master_weights) r.model->to(low_precision_dtype(r.precision), /*keep_norms_fp32=*/true);

  // Batches reach the device through the stager's own pinned buffers.
  r.loader = std::make_unique<data::DataLoader>(
      r.splits.train, data::LoaderOptions{.batch = c.batch, .shuffle = true, .augment = c.augment, .seed = c.seed});
  const Shape& image_shape = r.splits.train.images.sizes();
  r.stager = std::make_unique<BatchStager>(r.device, Shape(image_shape.begin() + 1, image_shape.end()), c.batch);
  r.metrics = std::make_unique<StepMetrics>(r.device);
  r.batches = r.loader->batches_per_epoch();
  r.steps_per_epoch = std::max<int64_t>(r.batches / c.grad_accum, 1);
  const int64_t total_steps = c.epochs * r.steps_per_epoch;

  r.opt = make_optimizer(c, *r.model, {.master_weights = c.master_weights, .seed = c.seed});
  r.scheduler = make_scheduler(c, *r.opt, total_steps);
  // The schedule counts on the device, so a skipped f16 step holds it back
  // without the host reading the skip flag.
  r.scheduler->use_device_counter(r.device);
  // f16 needs loss scaling; bf16 keeps f32's exponent range and needs none.
  // The collapse warning comes from the trainer's asynchronous metrics instead
  // of the scaler's own periodic read.
  r.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.enabled = r.precision == Precision::Fp16, .collapse_check_interval = 0});
  if (!c.resume.empty()) r.pos = load_checkpoint(c.resume, c, *r.model, *r.opt, *r.scaler, *r.scheduler);
  r.summary.parameters = r.model->parameter_count();
  if (c.cuda_graph) {
    MT_CHECK(!r.device.is_cpu(), "train: --cuda-graph needs --device cuda or sim (the CPU has no graphs)");
    r.graphed = std::make_unique<GraphedStep>();
    r.graphed->graph = std::make_unique<CudaGraph>(r.device);
  }
}

// Forward and backward of one micro-batch already on the device; the loss stays there.
void forward_backward(TrainingRun& r, const Tensor& images, const Tensor& labels) {
  Tensor loss;
  {
    amp::Autocast guard(r.device, low_precision_dtype(r.precision), r.precision != Precision::Fp32);
    loss = cross_entropy(r.model->forward(images), labels);
  }
  const Tensor micro_loss = r.c.grad_accum > 1 ? div(loss, static_cast<double>(r.c.grad_accum)) : loss;
  r.scaler->scale(micro_loss).backward();
  NoGradGuard no_grad;
  r.accumulated_loss =
      r.accumulated_loss.defined() ? add(r.accumulated_loss, micro_loss.detach()) : micro_loss.detach();
}

// Unscale, clip, step, update: every decision (skip, schedule) on the device,
// so the whole of it can be captured in a CUDA graph.
StepTensors device_step(TrainingRun& r) {
  Tensor grad_norm;
  if (r.c.clip > 0) {
    r.scaler->unscale_(*r.opt);  // clip the true gradients, not the scaled ones
    grad_norm = optim::clip_grad_norm_(r.model->parameters(), r.c.clip);
  }
  const amp::StepOutcome outcome = r.scaler->step(*r.opt);
  r.scaler->update();
  r.scheduler->step_unless(outcome.found_inf());  // a skipped step must not advance the schedule
  r.opt->zero_grad();
  return {std::exchange(r.accumulated_loss, Tensor()), grad_norm, outcome.found_inf()};
}

// The host's part of a step: its position, and the asynchronous read-back of its values.
void finish_step(TrainingRun& r, const StepTensors& step, const data::Batch& last_batch, int64_t epoch) {
  ++r.pos.step;
  r.pos.epoch = epoch;
  r.pos.batch_in_epoch = last_batch.index + 1;
  r.metrics->stage({.step = r.pos.step, .epoch = epoch, .batch = last_batch.index}, step.loss, step.grad_norm,
                   step.found_inf, r.scaler->is_enabled() ? r.scaler->scale_tensor() : Tensor(),
                   r.scheduler->device_factor());
}

void stage_micro_batch(TrainingRun& r, GraphedStep& g, const data::Batch& batch) {
  const BatchStager::OnDevice on_device = r.stager->upload(batch);
  const auto m = static_cast<size_t>(r.micro);
  if (g.images.size() <= m) {
    Shape shape = on_device.images.sizes();
    shape[0] = r.c.batch;
    g.images.push_back(empty(shape, kF32, r.device));
    g.labels.push_back(empty({r.c.batch}, kI64, r.device));
    g.sizes.push_back(0);
  }
  const int64_t n = on_device.labels.numel();
  copy_(g.images[m].narrow(0, 0, n), on_device.images);
  copy_(g.labels[m].narrow(0, 0, n), on_device.labels);
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
      forward_backward(r, g.images[m].narrow(0, 0, g.sizes[m]), g.labels[m].narrow(0, 0, g.sizes[m]));
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
  throw NonFiniteLoss(
      fmt::format("the loss became {} at step {} (epoch {}). Recent loss scales: [{}]. Last finite losses: [{}]. {}",
                  v.loss, v.step, v.epoch + 1, fmt::join(r.recent_scales, ", "), fmt::join(r.recent_losses, ", "),
                  r.c.save.empty() ? "No checkpoint was being written."
                                   : fmt::format("The last good checkpoint '{}' was kept.", r.c.save)));
}

// Reports the steps whose values have come back from the device.
void report_steps(TrainingRun& r, const std::vector<StepValues>& arrived, Reporter& reporter,
                  const Throughput& throughput) {
  for (const StepValues& v : arrived) {
    if (!std::isfinite(v.loss)) stop_on_non_finite(r, v, reporter);
    if (v.skipped) ++r.summary.skipped_steps;
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
    reporter.step(m, r.c.epochs, r.batches);
  }
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
      forward_backward(r, on_device.images, on_device.labels);
    }
    throughput.add_samples(batch->labels.numel());
    if (++r.micro < r.c.grad_accum) {
      if (r.steps_this_run > 0) r.steady_syncs += host_sync_count() - syncs_before;
      continue;
    }
    r.micro = 0;
    finish_step(r, r.graphed ? graphed_step(r, *r.graphed) : device_step(r), *batch, epoch);
    throughput.step_done();
    report_steps(r, r.metrics->poll(), reporter, throughput);
    if (++r.steps_this_run > 1) {  // the first step carries one-time set-up
      r.steady_syncs += host_sync_count() - syncs_before;
      ++r.steady_steps;
    }
    if (r.c.max_steps > 0 && r.pos.step >= r.c.max_steps) return true;
  }
  return false;
}

void write_summary(TrainingRun& r, std::FILE* out, Reporter& reporter) {
  TrainSummary& summary = r.summary;
  summary.peak_memory_bytes = memory_stats(r.device).peak_bytes;
  summary.steps = r.pos.step;
  summary.final_scale = r.scaler->get_scale();
  summary.host_syncs_per_step =
      r.steady_steps > 0 ? static_cast<double>(r.steady_syncs) / static_cast<double>(r.steady_steps) : 0.0;
  std::fprintf(
      out, "test accuracy %.2f%%  |  %lld steps in %.1f s, %.0f samples/s, peak memory %s, skipped steps %lld\n",
      100.0 * summary.test_accuracy, static_cast<long long>(summary.steps), summary.seconds, summary.samples_per_second,
      megabytes(summary.peak_memory_bytes).c_str(), static_cast<long long>(summary.skipped_steps));
  if (!reporter.log.is_open()) return;
  reporter.log << nlohmann::json{{"summary",
                                  {{"test_accuracy", summary.test_accuracy},
                                   {"epoch_accuracies", summary.epoch_accuracies},
                                   {"seconds", summary.seconds},
                                   {"samples_per_s", summary.samples_per_second},
                                   {"peak_memory_bytes", summary.peak_memory_bytes},
                                   {"steps", summary.steps},
                                   {"skipped_steps", summary.skipped_steps},
                                   {"final_scale", summary.final_scale},
                                   {"host_syncs_per_step", summary.host_syncs_per_step},
                                   {"parameters", summary.parameters},
                                   {"config", config_json(r.c)}}}}
                      .dump()
               << '\n';
}

}  // namespace

TrainSummary train(const TrainConfig& requested, std::FILE* out) {
  TrainingRun r;
  setup_run(r, requested);
  const TrainConfig& c = r.c;
  Reporter reporter(out, c.progress, c.log);
  std::fprintf(out, "training %s (%lld parameters) on %s in %s%s, %s, batch %lld x %lld, %lld steps per epoch\n",
               c.model.c_str(), static_cast<long long>(r.summary.parameters), r.device.str().c_str(),
               c.precision.c_str(), c.master_weights ? " with f32 master weights" : "", c.optimizer.c_str(),
               static_cast<long long>(c.batch), static_cast<long long>(c.grad_accum),
               static_cast<long long>(r.steps_per_epoch));

  allocator_for(r.device).reset_peak();
  Throughput throughput;
  bool stop = false;
  for (int64_t epoch = r.pos.epoch; epoch < c.epochs && !stop; ++epoch) {
    stop = train_epoch(r, epoch, reporter, throughput);
    report_steps(r, r.metrics->flush(), reporter, throughput);  // a NaN loss stops here, before any checkpoint
    reporter.end_progress();
    if (!stop) {
      r.pos.epoch = epoch + 1;
      r.pos.batch_in_epoch = 0;
    }
    const auto epoch_end = Clock::now();
    const double accuracy = evaluate(*r.model, r.splits.test, r.precision, r.device);
    r.summary.epoch_accuracies.push_back(accuracy);
    std::fprintf(out, "epoch %lld: test accuracy %.2f%%\n", static_cast<long long>(epoch + 1), 100.0 * accuracy);
    if (!c.save.empty()) save_checkpoint(c.save, c, *r.model, *r.opt, *r.scaler, *r.scheduler, r.pos);
    throughput.exclude_seconds(std::chrono::duration<double>(Clock::now() - epoch_end).count());
  }
  r.summary.seconds = throughput.wall_seconds();
  r.summary.samples_per_second = throughput.samples_per_second();
  r.summary.test_accuracy = r.summary.epoch_accuracies.empty() ? 0 : r.summary.epoch_accuracies.back();
  write_summary(r, out, reporter);
  return r.summary;
}

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device_text) {
  const SafetensorsFile f = load_safetensors(path);
  auto model_name = f.metadata.find("model");
  auto precision = f.metadata.find("precision");
  MT_CHECK(model_name != f.metadata.end() && precision != f.metadata.end(),
           "checkpoint '{}' has no model/precision metadata (not a mixtape checkpoint?)", path);
  const Device device = resolve_device(device_text);
  std::shared_ptr<nn::Module> model = models::make_model(model_name->second);
  // A master-weight checkpoint stores low-precision parameters: match their dtype.
  const auto state = model_tensors(f);
  for (const auto& [name, p] : model->named_parameters()) {
    auto it = state.find(name);
    if (it != state.end() && it->second.dtype() != p.dtype()) {
      model->to(it->second.dtype());
      break;
    }
  }
  try {
    model->load_state_dict(state);
  } catch (const Error& e) {
    fail("checkpoint '{}' does not fit a '{}' model: {}", path, model_name->second, e.what());
  }
  model->to(device);
  const data::FashionMnist data = data::load_fashion_mnist(data_dir);
  return {evaluate(*model, data.test, parse_precision(precision->second), device), model_name->second,
          precision->second, metadata_int(f, "step", path)};
}

}  // namespace mt::tools
