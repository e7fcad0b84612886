#include "amp/grad_scaler.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "kernels/amp/amp.h"

namespace mt::amp {

bool StepOutcome::skipped() const { return found_inf_.defined() && found_inf_.item<double>() != 0.0; }

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  MT_CHECK(options.init_scale > 0, "GradScaler: init_scale must be positive, got {}", options.init_scale);
  MT_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got {}", options.growth_factor);
  MT_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
           "GradScaler: backoff_factor must be in (0, 1), got {}", options.backoff_factor);
  MT_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be positive, got {}",
           options.growth_interval);
}

GradScaler::~GradScaler() = default;

void GradScaler::ensure_state(Device device) {
  if (scale_.defined()) {
    MT_CHECK(scale_.device() == device, "GradScaler: loss on {} but the scale lives on {}", device, scale_.device());
    return;
  }
  scale_ = full({1}, options_.init_scale, kF32, device);
  growth_tracker_ = full({1}, static_cast<double>(initial_growth_tracker_), kI32, device);
  scale_at_last_check_ = options_.init_scale;
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  ensure_state(loss.device());
  // The product is recorded on the tape: backward starts from scale * dL,
  // and the gradients it writes carry the mark until unscale_.
  const Tensor factor = loss.dim() == 0 ? scale_.reshape({}) : scale_;
  Tensor scaled = mul(loss.dtype() == kF32 ? loss : loss.to(kF32), factor);
  scaled.impl()->loss_scaled = true;
  return scaled;
}

GradScaler::PerOptimizer& GradScaler::state_of(const optim::Optimizer& optimizer) { return per_optimizer_[&optimizer]; }

Tensor GradScaler::inverse_scale() const {
  NoGradGuard no_grad;
  // 1/scale in f64 rounded to f32, as PyTorch does (computed on the device).
  return reciprocal(scale_.to(kF64)).to(kF32);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  MT_CHECK(scale_.defined(), "GradScaler::unscale_: no loss was scaled yet; call scale(loss).backward() first");
  PerOptimizer& s = state_of(optimizer);
  MT_CHECK(s.stage != Stage::Unscaled,
           "GradScaler::unscale_: already called on this optimizer since the last update() (with gradient "
           "accumulation, unscale_ once per optimizer step, after the last micro-batch)");
  MT_CHECK(s.stage != Stage::Stepped, "GradScaler::unscale_: called after step(); call it before step()");
  const std::vector<Tensor> grads = optimizer.gradients();
  for (const Tensor& g : grads) {
    MT_CHECK(g.dtype() != kF16,
             "GradScaler::unscale_: attempting to unscale f16 gradients (shape {}). Keep f32 parameters under "
             "autocast, or use an optimizer with master weights and let step() unscale inside the optimizer",
             g.shape_string());
  }
  check_gradients(optimizer, s, inverse_scale());
  for (const Tensor& g : grads) g.impl()->loss_scaled = false;
  s.stage = Stage::Unscaled;
}

void GradScaler::check_gradients(optim::Optimizer& optimizer, PerOptimizer& s, const Tensor& inv_scale) {
  s.found_inf = zeros({1}, kF32, scale_.device());
  if (!track_nonfinite_) {
    kernels::unscale_and_check_inf(optimizer.gradients(), s.found_inf, inv_scale);
  } else {
    // One flag per parameter, in the optimizer's order, whether or not it got
    // a gradient this step (an empty stand-in keeps its slot, never flagged),
    // so a flag's position always names the same parameter.
    s.nonfinite.parameters = optimizer.parameters();
    std::vector<Tensor> grads;
    for (const Tensor& p : s.nonfinite.parameters)
      grads.push_back(p.grad().defined() ? p.grad() : empty({0}, kF32, scale_.device()));
    s.nonfinite.flags = zeros({static_cast<int64_t>(grads.size())}, kF32, scale_.device());
    kernels::unscale_and_check_inf(grads, s.found_inf, inv_scale, s.nonfinite.flags);
  }
  // An optimizer that sees part of the gradients (a ZeRO shard) makes its found_inf global.
  optimizer.combine_found_inf(s.found_inf);
}

GradScaler::NonfiniteGradients GradScaler::nonfinite_gradients(const optim::Optimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  MT_CHECK(track_nonfinite_ && it != per_optimizer_.end() && it->second.nonfinite.flags.defined(),
           "GradScaler::nonfinite_gradients: call track_nonfinite_gradients(true), then step(optimizer), first");
  return it->second.nonfinite;
}

StepOutcome GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return StepOutcome();
  }
  MT_CHECK(scale_.defined(), "GradScaler::step: no loss was scaled yet; call scale(loss).backward() first");
  PerOptimizer& s = state_of(optimizer);
  MT_CHECK(s.stage != Stage::Stepped, "GradScaler::step: already called on this optimizer since the last update()");
  if (s.stage == Stage::Ready) {
    // Fused path: one pass checks for inf/NaN, the optimizer kernel unscales
    // as it reads each gradient (in f32, so f16 gradients lose nothing).
    check_gradients(optimizer, s, Tensor());
    optimizer.step({inverse_scale(), s.found_inf, Tensor()});
  } else {
    optimizer.step({Tensor(), s.found_inf, Tensor()});
  }
  s.stage = Stage::Stepped;
  return StepOutcome(s.found_inf);
}

void GradScaler::update() {
  if (!options_.enabled) return;
  MT_CHECK(scale_.defined(), "GradScaler::update: no loss was scaled yet");
  Tensor found_inf;
  for (auto& [optimizer, s] : per_optimizer_) {
    if (!s.found_inf.defined()) continue;
    NoGradGuard no_grad;
    found_inf = found_inf.defined() ? add(found_inf, s.found_inf) : s.found_inf;  // combined on the device
  }
  MT_CHECK(found_inf.defined(),
           "GradScaler::update: no inf checks were recorded; call step(optimizer) (or unscale_) before update()");
  kernels::update_scale(scale_, growth_tracker_, found_inf,
                        {options_.growth_factor, options_.backoff_factor, options_.growth_interval, options_.min_scale,
                         options_.max_scale});
  per_optimizer_.clear();
  check_for_collapse();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  MT_CHECK(scale_.defined(), "GradScaler::update: no loss was scaled yet");
  MT_CHECK(new_scale > 0 && std::isfinite(new_scale), "GradScaler::update: new scale must be positive and finite");
  NoGradGuard no_grad;
  fill_(scale_, new_scale);
  per_optimizer_.clear();
}

void GradScaler::check_for_collapse() {
  if (options_.collapse_check_interval <= 0 || ++updates_since_check_ < options_.collapse_check_interval) return;
  updates_since_check_ = 0;
  const double now = get_scale();  // a sync, once per interval
  if (now < 1.0) {
    spdlog::warn(
        "GradScaler: the loss scale fell to {:g} (< 1): gradients overflow f16 even unscaled. Typical causes: a "
        "model pretrained in bf16 run in f16, a NaN-producing op, or too high a learning rate. Try bf16 autocast "
        "(no scaler needed) or look for the op producing inf.",
        now);
  } else if (now < scale_at_last_check_ / 1024.0) {
    spdlog::warn("GradScaler: the loss scale keeps falling ({:g} -> {:g} in {} updates): most steps are skipped",
                 scale_at_last_check_, now, options_.collapse_check_interval);
  }
  scale_at_last_check_ = now;
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

optim::StateDict GradScaler::state_dict() const {
  optim::StateDict out;
  if (!options_.enabled) return out;
  out["scale"] = scale_tensor().defined() ? scale_.clone().detach() : full({1}, options_.init_scale);
  out["growth_tracker"] = growth_tracker_.defined() ? growth_tracker_.clone().detach()
                                                    : full({1}, static_cast<double>(initial_growth_tracker_), kI32);
  out["growth_factor"] = scalar_tensor(options_.growth_factor, kF64);
  out["backoff_factor"] = scalar_tensor(options_.backoff_factor, kF64);
  out["growth_interval"] = scalar_tensor(static_cast<double>(options_.growth_interval), kF64);
  return out;
}

void GradScaler::load_state_dict(const optim::StateDict& state) {
  MT_CHECK(options_.enabled || state.empty(), "GradScaler::load_state_dict: this scaler is disabled");
  if (!options_.enabled) return;
  auto get = [&](const char* key) -> const Tensor& {
    auto it = state.find(key);
    MT_CHECK(it != state.end(),
             "GradScaler::load_state_dict: missing '{}' (was the checkpoint saved without the "
             "scaler state?)",
             key);
    return it->second;
  };
  NoGradGuard no_grad;
  const Tensor& scale = get("scale");
  const Tensor& growth_tracker = get("growth_tracker");
  // A scale of 0, inf or NaN turns every weight into NaN on the first step;
  // refuse the state instead of training on it.
  const double scale_value = scale.item<double>(), tracker = growth_tracker.item<double>();
  const double growth = get("growth_factor").item<double>(), backoff = get("backoff_factor").item<double>();
  const double interval = get("growth_interval").item<double>();
  MT_CHECK(std::isfinite(scale_value) && scale_value > 0,
           "GradScaler::load_state_dict: the scale must be finite and positive, got {}", scale_value);
  MT_CHECK(tracker >= 0 && tracker == std::floor(tracker) && tracker < 1e15,
           "GradScaler::load_state_dict: growth_tracker must be a whole number >= 0, got {}", tracker);
  MT_CHECK(std::isfinite(growth) && growth > 1, "GradScaler::load_state_dict: growth_factor must be > 1, got {}",
           growth);
  MT_CHECK(backoff > 0 && backoff < 1, "GradScaler::load_state_dict: backoff_factor must be in (0, 1), got {}",
           backoff);
  MT_CHECK(interval >= 1 && interval == std::floor(interval) && interval < 1e15,
           "GradScaler::load_state_dict: growth_interval must be a whole number >= 1, got {}", interval);
  if (scale_.defined()) {
    copy_(scale_, scale);
    copy_(growth_tracker_, growth_tracker);
  } else {
    // As PyTorch's GradScaler: the values become the initial state, created
    // on the device of the first scaled loss (a CPU checkpoint resumes a GPU run).
    options_.init_scale = scale.item<double>();
    initial_growth_tracker_ = static_cast<int64_t>(growth_tracker.item<double>());
  }
  options_.growth_factor = growth;
  options_.backoff_factor = backoff;
  options_.growth_interval = static_cast<int64_t>(interval);
  per_optimizer_.clear();
}

}  // namespace mt::amp
