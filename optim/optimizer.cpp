#include "optim/optimizer.h"

#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/graph.h"
#include "core/memory_ledger.h"
#include "core/stream.h"
#include "optim/offload.h"

namespace mt::optim {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(std::vector<ParamGroup> groups, GroupDefaults defaults, PrecisionOptions precision)
    : groups_(std::move(groups)), precision_(precision) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].lr) groups_[g].lr = defaults.lr;
    if (!groups_[g].weight_decay) groups_[g].weight_decay = defaults.weight_decay;
    for (const Tensor& p : groups_[g].params) {
      MT_CHECK(p.defined() && p.is_leaf() && is_compute_float(p.dtype()),
               "optimizer: parameters must be floating-point (f64, f32, f16 or bf16) leaf tensors (group {})", g);
      MT_CHECK(p.is_contiguous(), "optimizer: parameter of shape {} must be contiguous", p.shape_string());
    }
    MT_CHECK(*groups_[g].lr >= 0, "optimizer: group {} has a negative learning rate {}", g, *groups_[g].lr);
    state_.emplace_back(groups_[g].params.size());
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

std::vector<Tensor> Optimizer::gradients() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters()) {
    if (p.grad().defined()) out.push_back(p.grad());
  }
  return out;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : parameters()) p.impl()->grad.reset();
}

namespace {

// A host copy of `t` for offloaded state: pinned memory where a GPU allows
// (so the copies to and from the device do not make the host wait).
Tensor host_copy(const Tensor& t) {
  Tensor host = empty_pinned(t.sizes(), t.dtype());
  copy_(host, t);
  return host;
}

// A parameter moved since its state was made (model.to(device) after some
// steps; Module::to moves parameters in place): the state follows it, as
// its values, before the step that needs it there.
void follow_parameter(Tensor& state, Device device, MemoryCategory category) {
  if (!state.defined() || state.device() == device) return;
  state = state.to(device);
  tag_memory(state, category);
}

}  // namespace

Optimizer::ParamState& Optimizer::state_for(size_t group, size_t index) {
  ParamState& s = state_[group][index];
  const Tensor& p = groups_[group].params[index];
  NoGradGuard no_grad;
  // Offloaded state is made in host memory: the device never holds it all.
  const bool offload = offloaded(p);
  if (s.step.defined()) {
    const Device state_device = offload ? kCPU : p.device();
    follow_parameter(s.master, state_device, MemoryCategory::MasterWeights);
    follow_parameter(s.state1, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.state2, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.step, p.device(), MemoryCategory::OptimizerState);
    return s;
  }
  const auto placed = [&](const Tensor& t) { return offload ? host_copy(t) : t; };
  if (precision_.master_weights && is_low_precision(p.dtype())) {
    s.master = placed(p.detach().to(offload ? kCPU : p.device()).to(kF32));
  }
  // State is f32 whenever there is an f32 copy of the weights to update; in
  // pure low precision it lives in the parameter's own dtype.
  const DType state_dtype = p.dtype() == kF32 || s.master.defined() ? kF32 : p.dtype();
  const Device state_device = offload ? kCPU : p.device();
  const int n = state_count(groups_[group]);
  if (n >= 1) s.state1 = placed(zeros(p.sizes(), state_dtype, state_device));
  if (n >= 2) s.state2 = placed(zeros(p.sizes(), state_dtype, state_device));
  s.step = zeros({1}, kF32, p.device());  // stays on the device (the kernels count on it there)
  tag_memory(s.master, MemoryCategory::MasterWeights);
  for (const Tensor* t : {&s.state1, &s.state2, &s.step}) tag_memory(*t, MemoryCategory::OptimizerState);
  return s;
}

void Optimizer::update_offloaded(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group,
                                 const kernels::AmpControl& amp, kernels::StochasticRounding rounding) {
  const Device device = slots.front().param.device();
  if (!offload_ || offload_->device() != device) offload_ = std::make_unique<OffloadPipeline>(device);
  offload_->run(slots, [&](const kernels::ParamSlot& on_device) {
    update({on_device}, group, amp, rounding);
    // The next slot's stochastic rounding starts where the fused call would have started it.
    rounding.block_offset += (static_cast<uint64_t>(on_device.param.numel()) + 3) / 4;
  });
}

Tensor Optimizer::master_of(const Tensor& param) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (groups_[g].params[i].is_same(param)) return state_[g][i].master;
    }
  }
  return Tensor();
}

void Optimizer::step(const kernels::AmpControl& scaler_control) {
  NoGradGuard no_grad;
  kernels::AmpControl amp = scaler_control;
  if (lr_factor_.defined()) amp.lr_factor = lr_factor_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    // One fused call per parameter dtype within the group.
    for (DType dtype : {kF32, kF16, kBF16, kF64}) {
      std::vector<kernels::ParamSlot> slots;
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        const Tensor& p = groups_[g].params[i];
        if (p.dtype() != dtype || !p.grad().defined()) continue;
        MT_CHECK(p.grad().sizes() == p.sizes(), "{}: gradient shape {} does not match parameter shape {}", name(),
                 p.grad().shape_string(), p.shape_string());
        const ParamState& s = state_for(g, i);
        slots.push_back({p, p.grad(), s.master, s.state1, s.state2, s.step});
      }
      if (slots.empty()) continue;
      MT_CHECK(!precision_.stochastic_rounding || !graph_capture_active(),
               "{}: stochastic rounding cannot be captured in a CUDA graph yet: its random offset is drawn on the "
               "host, so every replay would round the same way",
               name());
      kernels::StochasticRounding rounding{precision_.stochastic_rounding, precision_.seed, rounding_offset_};
      if (offloaded(slots.front().param)) {
        update_offloaded(slots, groups_[g], amp, rounding);
      } else {
        update(slots, groups_[g], amp, rounding);
      }
      for (const auto& slot : slots) rounding_offset_ += (static_cast<uint64_t>(slot.param.numel()) + 3) / 4;
    }
  }
}

StateDict Optimizer::state_dict() const {
  // Offloaded state is written back by asynchronous copies: let them land before reading it.
  if (offload_) offload_->wait();
  StateDict out;
  size_t flat = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    out[fmt::format("group.{}.lr", g)] = scalar_tensor(*groups_[g].lr, kF64);
    out[fmt::format("group.{}.weight_decay", g)] = scalar_tensor(*groups_[g].weight_decay, kF64);
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++flat) {
      const ParamState& s = state_[g][i];
      if (!s.step.defined()) continue;  // never stepped: no state yet
      out[fmt::format("state.{}.step", flat)] = s.step.clone().detach();
      if (s.master.defined()) out[fmt::format("state.{}.master", flat)] = s.master.clone().detach();
      if (s.state1.defined()) out[fmt::format("state.{}.{}", flat, state_name(0))] = s.state1.clone().detach();
      if (s.state2.defined()) out[fmt::format("state.{}.{}", flat, state_name(1))] = s.state2.clone().detach();
    }
  }
  return out;
}

// Every key must be one this optimizer would have written: a key it would
// ignore means the state came from another optimizer or was edited, and a
// moment without its parameter's step would silently restart that
// parameter's state. Checked before anything is loaded.
void Optimizer::check_state_keys(const StateDict& state) const {
  std::set<std::string> known;
  size_t flat = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    known.insert(fmt::format("group.{}.lr", g));
    known.insert(fmt::format("group.{}.weight_decay", g));
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++flat) {
      const std::string step = fmt::format("state.{}.step", flat);
      if (state.count(step) == 0) continue;
      known.insert(step);
      if (precision_.master_weights && is_low_precision(groups_[g].params[i].dtype())) {
        known.insert(fmt::format("state.{}.master", flat));
      }
      for (int k = 0; k < state_count(groups_[g]); ++k) known.insert(fmt::format("state.{}.{}", flat, state_name(k)));
    }
  }
  for (const auto& [key, value] : state) {
    if (known.count(key) != 0) continue;
    const size_t dot = key.find('.', 6);
    if (key.rfind("state.", 0) == 0 && dot != std::string::npos && state.count(key.substr(0, dot) + ".step") == 0) {
      fail("{}::load_state_dict: '{}' has no '{}.step' beside it (its parameter's state would restart from zero)",
           name(), key, key.substr(0, dot));
    }
    fail(
        "{}::load_state_dict: unknown key '{}' (state of another optimizer, param-group layout or --master-weights "
        "setting?)",
        name(), key);
  }
}

void Optimizer::load_state_dict(const StateDict& state) {
  NoGradGuard no_grad;
  check_state_keys(state);
  // Copies back from the last offloaded step still write the host state about to be replaced.
  if (offload_) offload_->wait();
  auto find = [&](const std::string& key) -> const Tensor* {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &it->second;
  };
  size_t flat = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor* lr = find(fmt::format("group.{}.lr", g));
    MT_CHECK(lr != nullptr,
             "{}::load_state_dict: missing 'group.{}.lr' (was the state saved from an optimizer with "
             "{} param groups?)",
             name(), g, groups_.size());
    groups_[g].lr = lr->item<double>();
    if (const Tensor* wd = find(fmt::format("group.{}.weight_decay", g))) groups_[g].weight_decay = wd->item<double>();
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++flat) {
      const Tensor* step = find(fmt::format("state.{}.step", flat));
      state_[g][i] = ParamState{};
      if (step == nullptr) continue;
      ParamState& s = state_for(g, i);
      auto load = [&](const Tensor& into, const std::string& key) {
        if (!into.defined()) return;
        const Tensor* src = find(key);
        MT_CHECK(src != nullptr, "{}::load_state_dict: missing '{}'", name(), key);
        MT_CHECK(src->sizes() == into.sizes(), "{}::load_state_dict: '{}' has shape {}, expected {}", name(), key,
                 src->shape_string(), into.shape_string());
        copy_(into, *src);
      };
      load(s.step, fmt::format("state.{}.step", flat));
      load(s.master, fmt::format("state.{}.master", flat));
      load(s.state1, fmt::format("state.{}.{}", flat, state_name(0)));
      load(s.state2, fmt::format("state.{}.{}", flat, state_name(1)));
    }
  }
}

// ---------------------------------------------------------------- AdamW and SGD

static std::vector<ParamGroup> single_group(const std::vector<Tensor>& params) { return {ParamGroup{params, {}, {}}}; }

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options, PrecisionOptions precision)
    : Optimizer(std::move(groups), {options.lr, options.weight_decay}, precision), options_(options) {
  MT_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
           "AdamW: betas must be in [0, 1), got ({}, {})", options.beta1, options.beta2);
  MT_CHECK(options.eps >= 0, "AdamW: eps must be non-negative, got {}", options.eps);
}

AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions options, PrecisionOptions precision)
    : AdamW(single_group(params), options, precision) {}

void AdamW::update(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group,
                   const kernels::AmpControl& amp, const kernels::StochasticRounding& rounding) {
  kernels::AdamWArgs args{*group.lr, options_.beta1, options_.beta2, options_.eps, *group.weight_decay};
  kernels::adamw_step(slots, args, amp, rounding);
}

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options, PrecisionOptions precision)
    : Optimizer(std::move(groups), {options.lr, options.weight_decay}, precision), options_(options) {
  MT_CHECK(options.momentum >= 0, "SGD: momentum must be non-negative, got {}", options.momentum);
  MT_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
           "SGD: nesterov needs momentum > 0 and dampening = 0");
}

SGD::SGD(const std::vector<Tensor>& params, SgdOptions options, PrecisionOptions precision)
    : SGD(single_group(params), options, precision) {}

void SGD::update(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group, const kernels::AmpControl& amp,
                 const kernels::StochasticRounding& rounding) {
  kernels::SgdArgs args{*group.lr, options_.momentum, options_.dampening, *group.weight_decay, options_.nesterov};
  kernels::sgd_step(slots, args, amp, rounding);
}

// ---------------------------------------------------------------- clipping

namespace {

// The defined gradients of `params` and their global L2 norm (f32 0-dim).
std::pair<std::vector<Tensor>, Tensor> gradients_and_norm(const std::vector<Tensor>& params, const char* caller,
                                                          bool scaled_allowed = false) {
  for (const Tensor& p : params) {
    MT_CHECK(scaled_allowed || !p.grad().defined() || !p.grad().impl()->loss_scaled,
             "{}: the gradients are still multiplied by the loss scale (GradScaler::scale(loss) was "
             "used but unscale_(optimizer) was not called for the optimizer of a parameter of shape {}). Call "
             "scaler.unscale_(optimizer) before clipping, then scaler.step(optimizer) and scaler.update().",
             caller, p.shape_string());
  }
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return {grads, zeros({})};
  NoGradGuard no_grad;
  Tensor squares = empty({1}, kF32, grads.front().device());
  kernels::sum_of_squares(grads, squares);
  return {grads, sqrt(squares)};
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  MT_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got {}", max_norm);
  auto [grads, norm] = gradients_and_norm(params, "clip_grad_norm_");
  if (grads.empty()) return norm;
  NoGradGuard no_grad;
  kernels::scale_by_clip_coefficient(grads, norm, max_norm);
  return norm.reshape({});
}

Tensor grad_norm(const std::vector<Tensor>& params, const Tensor& loss_scale) {
  auto [grads, norm] = gradients_and_norm(params, "grad_norm", loss_scale.defined());
  if (grads.empty()) return norm;
  NoGradGuard no_grad;
  if (loss_scale.defined()) norm = div(norm, loss_scale.reshape(norm.sizes()));
  return norm.reshape({});
}

}  // namespace mt::optim
