#include "amp/int8_quantize.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "autograd/grad_mode.h"

namespace mt::amp::int8 {
namespace {

bool kept_by_choice(const QuantizeOptions& options, const std::string& name) {
  return std::find(options.keep_float.begin(), options.keep_float.end(), name) != options.keep_float.end();
}

// The weight's INT8 form: per output channel, or one scale for all of it
// (stored per channel, every channel the same).
mt::int8::Int8Tensor quantize_weight(const Tensor& weight, bool per_tensor) {
  if (!per_tensor) return mt::int8::quantize_per_channel_symmetric(weight);
  const NoGradGuard no_grad;
  const double amax = max(weight.to(kF32).abs()).to_vector()[0];
  const double scale = amax > 0 ? amax / 127.0 : 1.0;
  return mt::int8::quantize(weight, full({weight.size(0)}, scale, kF32, weight.device()),
                            zeros({weight.size(0)}, kI32, weight.device()), 0, kI8);
}

// The layers `options` quantize, by name, and what they leave in float and why.
struct Selection {
  std::vector<std::pair<std::string, nn::QuantizableLayer*>> layers;
  std::vector<KeptFloat> kept_float;
};

Selection select_layers(nn::Module& model, const QuantizeOptions& options) {
  const auto modules = model.named_modules();
  for (const std::string& kept : options.keep_float) {
    const bool found = std::any_of(modules.begin(), modules.end(), [&](const auto& m) {
      return m.first == kept && m.second->template as<nn::QuantizableLayer>() != nullptr;
    });
    MT_CHECK(found, "int8: --keep-float '{}' is not a Linear or Conv2d layer of this model", kept);
  }
  Selection s;
  for (const auto& [name, module] : modules) {
    auto* layer = module->as<nn::QuantizableLayer>();
    if (layer == nullptr || layer->is_int8()) continue;
    if (kept_by_choice(options, name)) {
      s.kept_float.push_back({name, "left out by --keep-float"});
    } else if (const std::string reason = layer->int8_unsupported_reason(); !reason.empty()) {
      s.kept_float.push_back({name, reason});
    } else {
      s.layers.emplace_back(name, layer);
    }
  }
  return s;
}

}  // namespace

SmoothQuantCalibrator::SmoothQuantCalibrator(nn::Module& model, const QuantizeOptions& options) {
  for (const auto& [name, layer] : select_layers(model, options).layers) {
    if (auto* linear = layer->as<nn::Linear>()) watched_.push_back({name, linear, std::make_shared<Tensor>()});
  }
  for (Watched& w : watched_) {
    std::shared_ptr<Tensor> amax = w.channel_amax;
    w.layer->set_input_hook([amax](const Tensor& x) {
      const NoGradGuard no_grad;
      const Tensor batch = max(x.detach().to(kF32).reshape({-1, x.size(-1)}).abs(), 0).values;
      *amax = amax->defined() ? maximum(*amax, batch) : batch;
    });
  }
}

SmoothQuantCalibrator::~SmoothQuantCalibrator() { detach(); }

void SmoothQuantCalibrator::detach() {
  for (Watched& w : watched_) w.layer->set_input_hook(nullptr);
}

std::vector<std::string> SmoothQuantCalibrator::apply(double alpha) {
  MT_CHECK(alpha >= 0 && alpha <= 1, "SmoothQuant: alpha must be in [0, 1], got {}", alpha);
  detach();
  std::vector<std::string> smoothed;
  const NoGradGuard no_grad;
  for (Watched& w : watched_) {
    if (!w.channel_amax->defined()) continue;
    const std::vector<double> amax = w.channel_amax->to_vector();
    for (size_t j = 0; j < amax.size(); ++j) {
      MT_CHECK(std::isfinite(amax[j]), "SmoothQuant: the input of '{}' held a non-finite value (channel {})", w.name,
               j);
    }
    const Tensor weight_amax = clamp(max(w.layer->weight.detach().to(kF32).abs(), 0).values, 1e-5, std::nullopt);
    const Tensor s = clamp(pow(clamp(*w.channel_amax, 1e-5, std::nullopt), alpha) / pow(weight_amax, 1.0 - alpha), 1e-5,
                           std::nullopt);
    w.layer->smooth(s);
    smoothed.push_back(w.name);
  }
  return smoothed;
}

Calibrator::Calibrator(nn::Module& model, QuantizeOptions options) : options_(std::move(options)) {
  make_observer(options_.observer);  // an unknown name fails here, before any batch runs
  Selection selection = select_layers(model, options_);
  kept_float_ = std::move(selection.kept_float);
  for (const auto& [name, layer] : selection.layers) {
    watched_.push_back({name, layer, make_observer(options_.observer)});
  }
  for (Watched& w : watched_) {
    Observer* observer = w.observer.get();
    const std::string name = w.name;
    w.layer->set_input_hook([observer, name](const Tensor& x) {
      try {
        observer->observe(x.detach());
      } catch (const Error& e) {
        fail("calibration: the input of '{}' was refused: {}", name, e.what());
      }
    });
  }
}

Calibrator::~Calibrator() { detach(); }

void Calibrator::detach() {
  for (Watched& w : watched_) w.layer->set_input_hook(nullptr);
}

QuantizeReport Calibrator::convert() {
  MT_CHECK(!converted_, "Calibrator::convert: called twice");
  converted_ = true;
  detach();
  QuantizeReport report;
  report.kept_float = kept_float_;
  for (Watched& w : watched_) {
    if (w.observer->batches() == 0) {
      report.kept_float.push_back({w.name, "no calibration batch reached it"});
      continue;
    }
    const double scale = symmetric_scale(w.observer->range());
    const NoGradGuard no_grad;
    w.layer->to_int8(quantize_weight(w.layer->weight.detach(), options_.per_tensor_weights), scale, kInputZeroPoint);
    report.quantized.push_back(w.name);
  }
  return report;
}

namespace {

// What a module lists by names relative to itself, as the model's dotted names.
std::string absolute_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The model's module called `name`, as a T (null when there is none, or it is not a T).
template <typename T>
T* module_as(const std::vector<std::pair<std::string, nn::Module*>>& modules, const std::string& name) {
  auto it = std::find_if(modules.begin(), modules.end(), [&](const auto& m) { return m.first == name; });
  return it == modules.end() ? nullptr : it->second->template as<T>();
}

// Every pair the model's modules list, with absolute dotted names, resolved.
struct ConvBatchNorm {
  FoldedBatchNorm names;
  nn::Conv2d* conv;
  nn::BatchNorm2d* batch_norm;
};

std::vector<ConvBatchNorm> declared_pairs(nn::Module& model) {
  const auto modules = model.named_modules();
  std::vector<ConvBatchNorm> pairs;
  for (const auto& [prefix, module] : modules) {
    for (const auto& [conv_name, bn_name] : module->conv_batch_norm_pairs()) {
      const std::string conv = absolute_name(prefix, conv_name), bn = absolute_name(prefix, bn_name);
      auto* c = module_as<nn::Conv2d>(modules, conv);
      auto* b = module_as<nn::BatchNorm2d>(modules, bn);
      MT_CHECK(c != nullptr && b != nullptr,
               "{} lists ('{}', '{}') as a Conv2d and the BatchNorm2d after it, but they are not", module->name(), conv,
               bn);
      pairs.push_back({{conv, bn}, c, b});
    }
  }
  return pairs;
}

}  // namespace

std::vector<FoldedBatchNorm> fold_batch_norms(nn::Module& model) {
  std::vector<FoldedBatchNorm> folded;
  for (const ConvBatchNorm& pair : declared_pairs(model)) {
    if (pair.batch_norm->is_folded()) continue;
    pair.conv->fold_batch_norm(*pair.batch_norm);
    folded.push_back(pair.names);
  }
  return folded;
}

void prepare_folded_batch_norms(nn::Module& model, const std::vector<FoldedBatchNorm>& folded) {
  const std::vector<ConvBatchNorm> pairs = declared_pairs(model);
  for (const FoldedBatchNorm& f : folded) {
    auto it = std::find_if(pairs.begin(), pairs.end(), [&](const ConvBatchNorm& p) { return p.names == f; });
    MT_CHECK(it != pairs.end(),
             "folded batch norm ('{}' into '{}'): not a convolution and batch norm pair this "
             "model can fold",
             f.batch_norm, f.conv);
    it->conv->make_bias_slot();
    it->batch_norm->mark_folded();
  }
}

void prepare_int8_layers(nn::Module& model, const std::vector<std::string>& layers, bool smoothed) {
  auto modules = model.named_modules();
  for (const std::string& name : layers) {
    auto it = std::find_if(modules.begin(), modules.end(), [&](const auto& m) { return m.first == name; });
    MT_CHECK(it != modules.end() && it->second->as<nn::QuantizableLayer>() != nullptr,
             "INT8 checkpoint: '{}' is not a Linear or Conv2d layer of this model", name);
    auto* layer = it->second->as<nn::QuantizableLayer>();
    if (!layer->is_int8()) layer->make_int8_slots(smoothed && layer->as<nn::Linear>() != nullptr);
  }
}

void check_int8_layers(nn::Module& model) {
  for (const auto& [name, module] : model.named_modules()) {
    auto* layer = module->as<nn::QuantizableLayer>();
    if (layer == nullptr || !layer->is_int8()) continue;
    try {
      layer->check_int8();
    } catch (const Error& e) {
      fail("INT8 layer '{}': {}", name, e.what());
    }
  }
}

namespace {

// A declared handoff, resolved: both layers found, absolute names.
struct ResolvedHandoff {
  Int8Handoff names;
  nn::QuantizableLayer* from;
  nn::QuantizableLayer* to;
};

std::vector<ResolvedHandoff> declared_handoffs(nn::Module& model) {
  const auto modules = model.named_modules();
  std::vector<ResolvedHandoff> handoffs;
  for (const auto& [prefix, module] : modules) {
    for (const nn::Module::Int8Handoff& h : module->int8_handoffs()) {
      const std::string from = absolute_name(prefix, h.from), to = absolute_name(prefix, h.to);
      auto* a = module_as<nn::QuantizableLayer>(modules, from);
      auto* b = module_as<nn::QuantizableLayer>(modules, to);
      MT_CHECK(a != nullptr && b != nullptr,
               "{} lists an INT8 handoff from '{}' to '{}', but they are not Linear or "
               "Conv2d layers",
               module->name(), from, to);
      handoffs.push_back({{from, to, h.relu}, a, b});
    }
  }
  return handoffs;
}

bool can_hand_off(const ResolvedHandoff& h) {
  return h.from->is_int8() && h.to->is_int8() && !h.to->input_smooth.defined();
}

void hand_off(const ResolvedHandoff& h) {
  h.to->check_int8();  // the scale and zero point it hands over are valid
  h.from->requantize_output({.scale = h.to->input_scale.item<double>(),
                             .zero_point = static_cast<int32_t>(h.to->input_zero_point.item<double>()),
                             .relu = h.names.relu});
}

}  // namespace

std::vector<Int8Handoff> chain_int8_layers(nn::Module& model) {
  std::vector<Int8Handoff> made;
  for (const ResolvedHandoff& h : declared_handoffs(model)) {
    if (!can_hand_off(h)) continue;
    hand_off(h);
    made.push_back(h.names);
  }
  return made;
}

void apply_int8_handoffs(nn::Module& model, const std::vector<Int8Handoff>& handoffs) {
  const std::vector<ResolvedHandoff> declared = declared_handoffs(model);
  for (const Int8Handoff& h : handoffs) {
    auto it = std::find_if(declared.begin(), declared.end(), [&](const ResolvedHandoff& d) { return d.names == h; });
    MT_CHECK(it != declared.end(), "INT8 handoff '{}' -> '{}' (relu {}): not one this model declares", h.from, h.to,
             h.relu);
    MT_CHECK(can_hand_off(*it), "INT8 handoff '{}' -> '{}': both layers must be INT8, the second per tensor", h.from,
             h.to);
    hand_off(*it);
  }
}

std::vector<std::string> int8_layer_names(nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& [name, module] : model.named_modules()) {
    auto* layer = module->as<nn::QuantizableLayer>();
    if (layer != nullptr && layer->is_int8()) names.push_back(name);
  }
  return names;
}

}  // namespace mt::amp::int8
