#include "tools/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/process_group.h"
#include "tools/train/checkpoint.h"
#include "tools/train/run.h"

namespace mt::tools {

double Evaluation::perplexity() const { return std::exp(loss); }

namespace {

struct EvaluationSums {
  double correct = 0, loss = 0, targets = 0;
  Evaluation mean() const { return targets > 0 ? Evaluation{correct / targets, loss / targets} : Evaluation{}; }
};

// One target per sample (images, passages) would make 32768 samples one
// batch: the cnn's 10,000 test images held about 1 GB per activation, 3.8 GB
// at the peak, and each evaluation page-faulted all of it in afresh (too
// large for the host cache to keep), so the kernel zeroing pages took 64%
// of `mixtape eval`'s time on the INT8 cnn. 512 samples keep every
// activation of the models here within the cache's reach; token tasks
// reach their targets first (32768 / 256 tokens = 128 sequences).
constexpr int64_t kMaxSamplesPerEvalBatch = 512;

EvaluationSums evaluation_sums(nn::Module& model, const data::TensorDataset& data, Precision precision, Device device,
                               int64_t targets_per_batch) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t targets_per_sample = data.size() > 0 ? data.targets.numel() / data.size() : 1;
  const int64_t batch = std::clamp<int64_t>(targets_per_batch / targets_per_sample, 1, kMaxSamplesPerEvalBatch);
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

Evaluation evaluate(nn::Module& model, const data::TensorDataset& data, Precision precision, Device device,
                    int64_t targets_per_batch) {
  // 0 correct of 0 is no accuracy at all, not 0%.
  MT_CHECK(data.size() > 0, "evaluate: the evaluation set is empty (0 samples): there is nothing to score");
  return evaluation_sums(model, data, precision, device, targets_per_batch).mean();
}

// ---------------------------------------------------------------- evaluation during training

namespace {

// Each rank evaluates its share of the held-out split (every sample once)
// with rank 0's buffers, and the sums are added up over the ranks.
Evaluation evaluate_across_ranks(TrainingRun& r) {
  std::vector<std::shared_ptr<dist::Work>> buffers;
  for (auto& [name, b] : r.model->named_buffers()) buffers.push_back(dist::group_for(r.device).broadcast(b, 0));
  for (auto& w : buffers) w->wait();
  const data::TensorDataset& test = r.splits.test;
  const int64_t n = test.size(), begin = n * r.rank / r.world, end = n * (r.rank + 1) / r.world;
  data::TensorDataset mine = test;
  mine.inputs = test.inputs.narrow(0, begin, end - begin);
  mine.targets = test.targets.narrow(0, begin, end - begin);
  const EvaluationSums local =
      end > begin ? evaluation_sums(*r.model, mine, r.precision, r.device, 32768) : EvaluationSums{};
  Tensor sums = from_vector(std::vector<double>{local.correct, local.loss, local.targets}, {3}, kF64);
  dist::world().all_reduce(sums)->wait();
  const std::vector<double> total = sums.to_vector();
  return EvaluationSums{total[0], total[1], total[2]}.mean();
}

}  // namespace

// Evaluates on the held-out split, prints and logs the result, and keeps it
// in the summary; its time is not training time.
namespace {

// A mixture of experts: what each MoE layer's router did over the training
// steps since the last evaluation (this rank's batches), printed and logged.
void report_router_statistics(TrainingRun& r, const std::string& when, Reporter& reporter, nlohmann::json& record) {
  const std::vector<models::MoeMlp*> layers = models::moe_layers(*r.model);
  if (layers.empty()) return;
  r.summary.router_statistics.clear();
  nlohmann::json logged = nlohmann::json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    const models::RouterStatistics s = layers[i]->take_statistics();
    r.summary.router_statistics.push_back(s);
    std::vector<std::string> shares;
    for (double share : s.expert_share) shares.push_back(fmt::format("{:.1f}%", 100.0 * share));
    std::fprintf(reporter.out,
                 "%s: router %zu: experts %s, dropped %.2f%%, entropy %.3f nats (uniform %.3f), balance loss %.3f, "
                 "z-loss %.3f\n",
                 when.c_str(), i, fmt::format("{}", fmt::join(shares, " ")).c_str(), 100.0 * s.dropped_share, s.entropy,
                 std::log(double(s.expert_share.size())), s.auxiliary_loss, s.z_loss);
    logged.push_back({{"expert_share", s.expert_share},
                      {"dropped_share", s.dropped_share},
                      {"entropy", s.entropy},
                      {"balance_loss", s.auxiliary_loss},
                      {"z_loss", s.z_loss},
                      {"tokens", s.tokens}});
  }
  record["router"] = logged;
}

}  // namespace

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
  report_router_statistics(r, when, reporter, record);
  reporter.record(nlohmann::json{{"eval", record}});
  throughput.exclude_seconds(std::chrono::duration<double>(Clock::now() - start).count());
  restart_step_clock(r);
  reset_memory_ledger_peak(r.device);
}

// ---------------------------------------------------------------- mixtape eval

ScoredModel score_model(nn::Module& model, const data::TensorDataset& test, Precision precision, Device device) {
  ScoredModel s;
  // The first pass pays for one-time set-up (oneDNN builds a kernel per
  // shape, buffers are first touched); the second is the one timed.
  evaluate(model, test, precision, device);
  const auto start = Clock::now();
  s.evaluation = evaluate(model, test, precision, device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  s.samples_per_second = seconds > 0 ? static_cast<double>(test.size()) / seconds : 0;
  for (const auto& [name, t] : model.state_dict()) s.weight_bytes += t.numel() * int64_t(element_size(t.dtype()));
  return s;
}

namespace {

// The recipe of an INT8 checkpoint, read defensively (the file is someone
// else's), and its float source scored now when it still loads.
Int8Comparison compare_int8(const SafetensorsFile& f, const std::string& path, nn::Module& model,
                            const data::TensorDataset& test, Precision precision, Device device) {
  const nlohmann::json j = nlohmann::json::parse(f.metadata.at("int8"), nullptr, /*allow_exceptions=*/false);
  MT_CHECK(j.is_object(), "checkpoint '{}': its 'int8' metadata is not a JSON object", path);
  auto text = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
  auto number = [&](const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; };
  Int8Comparison c;
  c.observer = text("observer");
  if (j.contains("smoothquant") && j["smoothquant"].is_number()) c.smoothquant = j["smoothquant"].get<double>();
  c.calibration_samples = static_cast<int64_t>(number("calibration_samples"));
  c.source = text("source");
  if (j.contains("layers") && j["layers"].is_array()) {
    for (const auto& l : j["layers"]) {
      if (l.is_string()) c.layers.push_back(l.get<std::string>());
    }
  }
  if (j.contains("kept_float") && j["kept_float"].is_array()) {
    for (const auto& k : j["kept_float"]) {
      if (k.is_object() && k.contains("layer") && k["layer"].is_string() && k.contains("reason") &&
          k["reason"].is_string()) {
        c.kept_float.emplace_back(k["layer"].get<std::string>(), k["reason"].get<std::string>());
      }
    }
  }
  c.folded = folded_batch_norms(j, path);  // checked already: the model loaded with these pairs folded
  c.handoffs = int8_handoffs(j, path);     // and with these handoffs made
  c.int8_model = score_model(model, test, precision, device);
  c.float_model.evaluation = {number("float_accuracy"), number("float_loss")};
  try {
    const SafetensorsFile source = load_safetensors(c.source);
    MT_CHECK(!source.metadata.count("int8") && source.metadata.count("model") &&
                 source.metadata.at("model") == f.metadata.at("model"),
             "not the float checkpoint of this model");
    std::shared_ptr<nn::Module> float_model = load_model_checkpoint(source, c.source, device);
    c.float_model = score_model(*float_model, test, precision, device);
    c.source_scored = true;
  } catch (const Error&) {
    // Moved or changed since quantize read it: the figures quantize recorded stand in.
  }
  return c;
}

}  // namespace

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data_dir, const std::string& device_text,
                               int64_t test_limit, bool half, NonFiniteWeights nonfinite) {
  const SafetensorsFile f = load_safetensors(path);
  const Device device = resolve_device(device_text);
  TrainConfig c = resolve_defaults(checkpoint_config(f, path), device);
  c.data.dir = data_dir;
  MT_CHECK(test_limit >= 0, "eval: --test-limit must not be negative, got {}", test_limit);
  c.data.test_limit = test_limit;
  const models::ModelInfo info = models::model_info(c.model);
  std::shared_ptr<nn::Module> model = load_model_checkpoint(f, path, device, nonfinite);
  const Splits splits = load_data(c, info);
  MT_CHECK(splits.test.size() > 0, "eval: the held-out split of '{}'{} holds 0 samples: there is nothing to evaluate",
           c.data.dataset, c.data.dir.empty() ? "" : fmt::format(" in '{}'", c.data.dir));
  EvalResult r;
  if (f.metadata.count("int8")) {
    r.int8 = compare_int8(f, path, *model, splits.test, *c.precision.mode, device);
    r.evaluation = r.int8->int8_model.evaluation;
  } else {
    r.evaluation = evaluate(*model, splits.test, *c.precision.mode, device);
  }
  r.language_model = info.task == models::ModelTask::LanguageModel;
  r.model = c.model;
  r.precision = precision_name(*c.precision.mode);
  r.dataset = c.data.dataset;
  r.step = checkpoint_step(f, path);
  if (half) {
    const Precision low = device.is_cpu() ? Precision::Bf16 : Precision::Fp16;
    r.half = true;
    r.half_dtype = precision_name(low);
    std::shared_ptr<nn::Module> f32_model = load_model_checkpoint(f, path, device, nonfinite);
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
