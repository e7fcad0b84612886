#include "tools/train/quantize.h"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "tools/train/output_paths.h"
#include "tools/train/run.h"

namespace mt::tools {
namespace {

// The first `samples` training samples through the float model, in batches,
// under the autocast it evaluates with: what each Linear's observer sees.
void calibrate(nn::Module& model, const data::TensorDataset& train, int64_t samples, Precision precision,
               Device device) {
  const NoGradGuard no_grad;
  model.eval();
  constexpr int64_t kBatch = 64;
  for (int64_t begin = 0; begin < samples; begin += kBatch) {
    const int64_t n = std::min(kBatch, samples - begin);
    const Tensor x = train.inputs.narrow(0, begin, n).to(device);
    const amp::Autocast guard(device, low_precision_dtype(precision), precision != Precision::Fp32);
    model.forward(x);
  }
}

nlohmann::json recipe_json(const QuantizeRequest& req, const Int8Comparison& c) {
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& [layer, reason] : c.kept_float) kept.push_back({{"layer", layer}, {"reason", reason}});
  nlohmann::json folded = nlohmann::json::array();
  for (const amp::int8::FoldedBatchNorm& f : c.folded)
    folded.push_back({{"conv", f.conv}, {"batch_norm", f.batch_norm}});
  nlohmann::json handoffs = nlohmann::json::array();
  for (const amp::int8::Int8Handoff& h : c.handoffs)
    handoffs.push_back({{"from", h.from}, {"to", h.to}, {"relu", h.relu}});
  return {{"scheme", "w8a8: weights i8 per output channel (symmetric), inputs u8 per tensor, zero point 128"},
          {"observer", c.observer},
          {"per_tensor_weights", req.per_tensor},
          {"smoothquant", req.smoothquant ? nlohmann::json(*req.smoothquant) : nlohmann::json()},
          {"calibration_samples", c.calibration_samples},
          {"layers", c.layers},
          {"kept_float", kept},
          {"folded_batch_norms", folded},
          {"handoffs", handoffs},
          {"source", c.source},
          {"float_loss", c.float_model.evaluation.loss},
          {"float_accuracy", c.float_model.evaluation.accuracy}};
}

}  // namespace

QuantizeResult quantize_checkpoint(const QuantizeRequest& req) {
  MT_CHECK(!req.out.empty(), "quantize: --out names the INT8 checkpoint to write");
  check_output_paths("quantize", {{"--out", req.out}}, {{"--checkpoint", req.checkpoint}, {"--data", req.data_dir}});
  const SafetensorsFile f = load_safetensors(req.checkpoint);
  MT_CHECK(!f.metadata.count("int8"), "quantize: '{}' is an INT8 checkpoint already", req.checkpoint);
  const Device device = resolve_device(req.device);
  TrainConfig c = resolve_defaults(checkpoint_config(f, req.checkpoint), device);
  c.data.dir = req.data_dir;
  MT_CHECK(req.test_limit >= 0 && req.calibrate >= 0, "quantize: --calibrate and --test-limit must not be negative");
  c.data.test_limit = req.test_limit;
  const models::ModelInfo info = models::model_info(c.model);
  const Splits splits = load_data(c, info);
  MT_CHECK(splits.test.size() > 0 && splits.train.size() > 0, "quantize: '{}' has an empty split", c.data.dataset);
  const Precision precision = *c.precision.mode;

  QuantizeResult r;
  r.model = c.model;
  r.language_model = info.task == models::ModelTask::LanguageModel;
  Int8Comparison& out = r.comparison;
  out.observer = req.observer;
  out.smoothquant = req.smoothquant;
  out.source = std::filesystem::absolute(req.checkpoint).string();
  out.source_scored = true;
  const int64_t default_samples = info.task == models::ModelTask::ImageClassification ? 1024 : 512;
  out.calibration_samples = std::min(req.calibrate > 0 ? req.calibrate : default_samples, splits.train.size());

  std::shared_ptr<nn::Module> model = load_model_checkpoint(f, req.checkpoint, device);
  out.float_model = score_model(*model, splits.test, precision, device);
  if (req.fold_batch_norm) out.folded = amp::int8::fold_batch_norms(*model);
  const amp::int8::QuantizeOptions options{
      .observer = req.observer, .per_tensor_weights = req.per_tensor, .keep_float = req.keep_float};
  if (req.smoothquant) {
    amp::int8::SmoothQuantCalibrator smoothing(*model, options);
    calibrate(*model, splits.train, out.calibration_samples, precision, device);
    smoothing.apply(*req.smoothquant);
  }
  amp::int8::Calibrator calibrator(*model, options);
  calibrate(*model, splits.train, out.calibration_samples, precision, device);
  const amp::int8::QuantizeReport report = calibrator.convert();
  MT_CHECK(!report.quantized.empty(), "quantize: no Linear layer of '{}' was calibrated: nothing to quantize", c.model);
  out.layers = report.quantized;
  for (const auto& k : report.kept_float) out.kept_float.emplace_back(k.layer, k.reason);
  if (req.requantize) out.handoffs = amp::int8::chain_int8_layers(*model);
  out.int8_model = score_model(*model, splits.test, precision, device);

  std::map<std::string, std::string> metadata = f.metadata;
  metadata["int8"] = recipe_json(req, out).dump();
  save_safetensors(req.out, model->state_dict(), metadata);
  return r;
}

}  // namespace mt::tools
