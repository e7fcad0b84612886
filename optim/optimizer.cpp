#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/graph.h"
#include "core/memory_ledger.h"
#include "core/stream.h"
#include "optim/offload.h"

#include <spdlog/spdlog.h>

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
  const int64_t block = precision_.state_block;
  MT_CHECK(block >= kernels::kMinStateBlock && block <= kernels::kMaxStateBlock && (block & (block - 1)) == 0,
           "optimizer: state_block must be a power of two from {} to {}, got {}", kernels::kMinStateBlock,
           kernels::kMaxStateBlock, block);
  MT_CHECK(precision_.min_quantized_numel >= 0, "optimizer: min_quantized_numel must be non-negative, got {}",
           precision_.min_quantized_numel);
}

const char* state_dtype_name(StateDtype dtype) {
  switch (dtype) {
    case StateDtype::F32: return "f32";
    case StateDtype::BF16: return "bf16";
    case StateDtype::Int8: return "int8";
  }
  return "?";
}

StateDtype parse_state_dtype(const std::string& text) {
  for (StateDtype d : {StateDtype::F32, StateDtype::BF16, StateDtype::Int8}) {
    if (text == state_dtype_name(d)) return d;
  }
  fail("unknown optimizer state dtype '{}': expected f32, bf16 or int8", text);
}

// Checks that `param` is one of this optimizer's and has no state yet: how
// it is stored can still be chosen.
void Optimizer::check_stateless_param(const Tensor& param, const char* what) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (!groups_[g].params[i].is_same(param)) continue;
      MT_CHECK(!state_[g][i].step.defined(), "{}::{}: the parameter of shape {} already has state", name(), what,
               param.shape_string());
      return;
    }
  }
  fail("{}::{}: the parameter of shape {} is not one of this optimizer's", name(), what, param.shape_string());
}

void Optimizer::keep_f32_state(const Tensor& param) {
  check_stateless_param(param, "keep_f32_state");
  f32_state_params_.push_back(param.impl());
}

void Optimizer::set_state_numel(const Tensor& param, int64_t numel) {
  check_stateless_param(param, "set_state_numel");
  MT_CHECK(numel >= param.numel(), "{}::set_state_numel: a part of {} elements cannot stand for {}", name(),
           param.numel(), numel);
  state_numel_[param.impl()] = numel;
}

kernels::StateFormat Optimizer::state_format_for(const Tensor& p) const {
  using kernels::StateFormat;
  if (p.dtype() == kF64) return StateFormat::Plain;
  if (std::find(f32_state_params_.begin(), f32_state_params_.end(), p.impl()) != f32_state_params_.end()) {
    return StateFormat::Plain;
  }
  switch (precision_.state_dtype) {
    case StateDtype::F32: return StateFormat::Plain;
    case StateDtype::BF16: return StateFormat::Bf16Stochastic;
    case StateDtype::Int8:
    {
      const auto whole = state_numel_.find(p.impl());
      const int64_t numel = whole != state_numel_.end() ? whole->second : p.numel();
      return numel >= precision_.min_quantized_numel ? StateFormat::Int8Blockwise : StateFormat::Plain;
    }
  }
  return StateFormat::Plain;
}

const Tensor& Optimizer::codes_on(Device device) {
  if (!codes_.defined() || codes_.device() != device) {
    const auto& table = kernels::dynamic_codes();
    codes_ = from_vector(std::vector<float>(table.begin(), table.end()), {static_cast<int64_t>(table.size())}, kF32,
                         device);
    tag_memory(codes_, MemoryCategory::OptimizerState);
  }
  return codes_;
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
  const Device state_device = offload ? kCPU : p.device();
  if (s.step.defined()) {
    follow_parameter(s.master, state_device, MemoryCategory::MasterWeights);
    follow_parameter(s.state1, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.state2, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.absmax1, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.absmax2, state_device, MemoryCategory::OptimizerState);
    follow_parameter(s.step, p.device(), MemoryCategory::OptimizerState);
    return s;
  }
  const auto placed = [&](const Tensor& t) { return offload ? host_copy(t) : t; };
  if (precision_.master_weights && is_low_precision(p.dtype())) {
    s.master = placed(p.detach().to(offload ? kCPU : p.device()).to(kF32));
  }
  const int n = state_count(groups_[group]);
  s.format = state_format_for(p);
  if (s.format == kernels::StateFormat::Int8Blockwise) {
    // Codes of 0 (the signed code's zero is entry 127) and absmax 0: all moments start at zero.
    const int64_t blocks = (p.numel() + precision_.state_block - 1) / precision_.state_block;
    if (n >= 1) s.state1 = placed(full(p.sizes(), kernels::kSignedZeroCode, kU8, state_device));
    if (n >= 2) s.state2 = placed(full(p.sizes(), kernels::kUnsignedZeroCode, kU8, state_device));
    if (n >= 1) s.absmax1 = placed(zeros({blocks}, kF32, state_device));
    if (n >= 2) s.absmax2 = placed(zeros({blocks}, kF32, state_device));
  } else {
    // Plain state is f32 whenever there is an f32 copy of the weights to
    // update; in pure low precision it lives in the parameter's own dtype.
    const DType plain = p.dtype() == kF32 || s.master.defined() ? kF32 : p.dtype();
    const DType state_dtype = s.format == kernels::StateFormat::Bf16Stochastic ? kBF16 : plain;
    if (n >= 1) s.state1 = placed(zeros(p.sizes(), state_dtype, state_device));
    if (n >= 2) s.state2 = placed(zeros(p.sizes(), state_dtype, state_device));
  }
  s.step = zeros({1}, kF32, p.device());  // stays on the device (the kernels count on it there)
  tag_memory(s.master, MemoryCategory::MasterWeights);
  for (const Tensor* t : {&s.state1, &s.state2, &s.absmax1, &s.absmax2, &s.step}) {
    tag_memory(*t, MemoryCategory::OptimizerState);
  }
  return s;
}

void Optimizer::update_offloaded(const std::vector<kernels::ParamSlot>& slots, const ParamGroup& group,
                                 const kernels::AmpControl& amp, const kernels::StochasticRounding& rounding) {
  const Device device = slots.front().param.device();
  if (!offload_ || offload_->device() != device) offload_ = std::make_unique<OffloadPipeline>(device);
  offload_->run(slots, [&](const kernels::ParamSlot& on_device) {
    update({on_device}, group, amp, rounding);
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

kernels::ParamSlot Optimizer::slot_for(size_t group, size_t index) {
  const Tensor& p = groups_[group].params[index];
  const ParamState& s = state_for(group, index);
  kernels::ParamSlot slot;
  slot.param = p;
  slot.grad = p.grad();
  slot.master = s.master;
  slot.state1 = s.state1;
  slot.state2 = s.state2;
  slot.step = s.step;
  slot.state_format = s.format;
  slot.absmax1 = s.absmax1;
  slot.absmax2 = s.absmax2;
  slot.state_block = precision_.state_block;
  size_t flat = index;
  for (size_t g = 0; g < group; ++g) flat += groups_[g].params.size();
  slot.rounding_key = kernels::rounding_key(precision_.seed, flat);
  if (s.format == kernels::StateFormat::Int8Blockwise && !p.device().is_cpu()) slot.codes = codes_on(p.device());
  return slot;
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
        slots.push_back(slot_for(g, i));
      }
      if (slots.empty()) continue;
      const kernels::StochasticRounding rounding{precision_.stochastic_rounding};
      if (offloaded(slots.front().param)) {
        update_offloaded(slots, groups_[g], amp, rounding);
      } else {
        update(slots, groups_[g], amp, rounding);
      }
    }
  }
}

StateDict Optimizer::state_dict() const {
  // Offloaded state is written back by asynchronous copies: let them land before reading it.
  if (offload_) offload_->wait();
  StateDict out;
  size_t flat = 0;
  bool any_int8 = false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    out[fmt::format("group.{}.lr", g)] = scalar_tensor(*groups_[g].lr, kF64);
    out[fmt::format("group.{}.weight_decay", g)] = scalar_tensor(*groups_[g].weight_decay, kF64);
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++flat) {
      const ParamState& s = state_[g][i];
      if (!s.step.defined()) continue;  // never stepped: no state yet
      out[fmt::format("state.{}.step", flat)] = s.step.clone().detach();
      if (s.master.defined()) out[fmt::format("state.{}.master", flat)] = s.master.clone().detach();
      const Tensor* moments[2][2] = {{&s.state1, &s.absmax1}, {&s.state2, &s.absmax2}};
      for (int k = 0; k < 2; ++k) {
        const std::string key = fmt::format("state.{}.{}", flat, state_name(k));
        if (moments[k][0]->defined()) out[key] = moments[k][0]->clone().detach();
        if (moments[k][1]->defined()) out[key + ".absmax"] = moments[k][1]->clone().detach();
        any_int8 = any_int8 || moments[k][1]->defined();
      }
    }
  }
  // 8-bit state's layout: the values per absmax (the codes say the rest).
  if (any_int8) out["format.state_block"] = scalar_tensor(static_cast<double>(precision_.state_block), kI64);
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
      for (int k = 0; k < state_count(groups_[g]); ++k) {
        known.insert(fmt::format("state.{}.{}", flat, state_name(k)));
        known.insert(fmt::format("state.{}.{}.absmax", flat, state_name(k)));
      }
    }
  }
  known.insert("format.state_block");
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
  std::map<std::string, int> conversions;  // moments loaded into another state format, by kind
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
      for (int k = 0; k < 2; ++k) {
        const std::string converted = load_moment(s, k, state, fmt::format("state.{}.{}", flat, state_name(k)));
        if (!converted.empty()) ++conversions[converted];
      }
    }
  }
  for (const auto& [what, count] : conversions) spdlog::info("{}: {} moment tensors {}", name(), count, what);
}

namespace {

// The saved 8-bit layout: format.state_block, checked before any block count is trusted.
int64_t saved_state_block(const StateDict& state, const char* optimizer) {
  auto it = state.find("format.state_block");
  MT_CHECK(it != state.end(), "{}::load_state_dict: 8-bit state without 'format.state_block'", optimizer);
  const auto block = static_cast<int64_t>(it->second.item<double>());
  MT_CHECK(block >= kernels::kMinStateBlock && block <= kernels::kMaxStateBlock && (block & (block - 1)) == 0,
           "{}::load_state_dict: 'format.state_block' is {}, not a power of two from {} to {}", optimizer, block,
           kernels::kMinStateBlock, kernels::kMaxStateBlock);
  return block;
}

// A saved absmax must be one non-negative finite f32 per block.
void check_absmax(const Tensor& absmax, int64_t numel, int64_t block, const std::string& key, const char* optimizer) {
  const int64_t blocks = (numel + block - 1) / block;
  MT_CHECK(absmax.dtype() == kF32 && absmax.dim() == 1 && absmax.numel() == blocks,
           "{}::load_state_dict: '{}' must be f32 [{}] ({} values in blocks of {}), got {} {}", optimizer, key, blocks,
           numel, block, absmax.dtype(), absmax.shape_string());
  for (double a : absmax.to_vector()) {
    MT_CHECK(std::isfinite(a) && a >= 0, "{}::load_state_dict: '{}' holds {}, not a finite non-negative absmax",
             optimizer, key, a);
  }
}

}  // namespace

Tensor moment_values(const StateDict& state, const std::string& key) {
  constexpr const char* kWho = "optimizer state";
  const auto it = state.find(key);
  MT_CHECK(it != state.end(), "{}: missing '{}'", kWho, key);
  const Tensor& stored = it->second;
  const auto absmax = state.find(key + ".absmax");
  if (absmax == state.end()) {
    MT_CHECK(is_compute_float(stored.dtype()), "{}: '{}' has dtype {}", kWho, key, stored.dtype());
    return stored.to(kCPU).to(kF32).contiguous();
  }
  MT_CHECK(stored.dtype() == kU8, "{}: '{}' is not 8-bit codes, yet '{}.absmax' is there", kWho, key, key);
  const int64_t block = saved_state_block(state, kWho);
  check_absmax(absmax->second, stored.numel(), block, key + ".absmax", kWho);
  const bool is_signed = key.size() < 11 || key.compare(key.size() - 11, 11, ".exp_avg_sq") != 0;
  return kernels::cpu::dequantize_blockwise(stored.to(kCPU), absmax->second.to(kCPU), block, is_signed);
}

std::string Optimizer::load_moment(ParamState& s, int k, const StateDict& state, const std::string& key) {
  Tensor& into = k == 0 ? s.state1 : s.state2;
  Tensor& into_absmax = k == 0 ? s.absmax1 : s.absmax2;
  if (!into.defined()) return "";
  auto it = state.find(key);
  MT_CHECK(it != state.end(), "{}::load_state_dict: missing '{}'", name(), key);
  const Tensor& src = it->second;
  MT_CHECK(src.sizes() == into.sizes(), "{}::load_state_dict: '{}' has shape {}, expected {}", name(), key,
           src.shape_string(), into.shape_string());
  auto absmax_it = state.find(key + ".absmax");
  const bool saved_int8 = src.dtype() == kU8;
  MT_CHECK(!saved_int8 || absmax_it != state.end(),
           "{}::load_state_dict: '{}' holds 8-bit codes but '{}.absmax' is missing", name(), key, key);
  MT_CHECK(saved_int8 || absmax_it == state.end(),
           "{}::load_state_dict: '{}' is not 8-bit codes, yet '{}.absmax' is there", name(), key, key);
  MT_CHECK(saved_int8 || is_compute_float(src.dtype()), "{}::load_state_dict: '{}' has dtype {}", name(), key,
           src.dtype());
  const int64_t saved_block = saved_int8 ? saved_state_block(state, name()) : 0;
  const bool is_signed = k == 0;
  if (into.dtype() == src.dtype() && (!saved_int8 || saved_block == precision_.state_block)) {
    if (saved_int8) check_absmax(absmax_it->second, src.numel(), saved_block, key + ".absmax", name());
    copy_(into, src);  // the same format: bit for bit
    if (saved_int8) copy_(into_absmax, absmax_it->second);
    return "";
  }
  // Another format: through f32 values (a resumed run is then close, not bit-identical).
  const Tensor values = moment_values(state, key);
  if (into.dtype() == kU8) {
    const Tensor codes = empty(into.sizes(), kU8), absmax = empty(into_absmax.sizes(), kF32);
    kernels::cpu::quantize_blockwise(values, precision_.state_block, is_signed, codes, absmax);
    copy_(into, codes);
    copy_(into_absmax, absmax);
  } else {
    copy_(into, values);
  }
  const auto describe = [](DType dtype, int64_t block) {
    return dtype == kU8 ? fmt::format("int8 (blocks of {})", block) : std::string(dtype_name(dtype));
  };
  return fmt::format("saved as {}, loaded as {}", describe(src.dtype(), saved_block),
                     describe(into.dtype(), precision_.state_block));
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
