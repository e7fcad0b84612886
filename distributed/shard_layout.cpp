#include "distributed/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/optim/optim.h"

namespace mt::dist {
namespace {

const char* const kStateNames[] = {"master", "exp_avg", "exp_avg_sq", "momentum_buffer"};

bool low_precision(DType dtype) { return dtype == kF16 || dtype == kBF16; }

// The dtype a consolidated state tensor of a `param`-typed parameter is
// saved in: BF16 moments as they are; 8-bit moments as their f32 values (a
// shard's blocks begin where its part of the parameter does, so the codes of
// different ranks do not make one tensor's blocks: the unsharded optimizer
// requantizes them on load). A parameter kept in f32 state (`kept_f32`) is
// saved as under StateDtype::F32.
DType state_dtype(DType param, bool kept_f32, const optim::Optimizer& opt, const std::string& name) {
  const optim::StateDtype stored = kept_f32 ? optim::StateDtype::F32 : opt.precision().state_dtype;
  if (name != "master" && param != kF64 && stored == optim::StateDtype::BF16) return kBF16;
  if (name == "master" || param == kF32 || (opt.has_master_weights() && low_precision(param))) return kF32;
  if (stored == optim::StateDtype::Int8) return kF32;
  return param;
}

// A state tensor of `state` as values: 8-bit codes dequantized (on the CPU:
// a shard's blocks, or a whole tensor's, do not line up with this rank's
// part), the rest as they are.
Tensor state_values(const optim::StateDict& state, const std::string& key) {
  const Tensor& stored = state.at(key);
  return state.count(key + ".absmax") == 0 ? stored : optim::moment_values(state, key).to(stored.device());
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<Tensor>& params, std::vector<std::vector<size_t>> units, int rank, int ranks)
    : rank_(rank), ranks_(ranks) {
  MT_CHECK(!params.empty(), "ShardLayout: no parameters");
  for (const Tensor& p : params) {
    shapes_.push_back(p.sizes());
    dtypes_.push_back(p.dtype());
  }
  offsets_.assign(params.size(), -1);
  f32_state_.assign(params.size(), false);
  for (std::vector<size_t>& members : units) {
    Unit unit{std::move(members), flat_elements_, 0, shard_elements_};
    int64_t total = 0;
    for (size_t i : unit.params) {
      MT_CHECK(i < params.size() && offsets_[i] < 0, "ShardLayout: the units must partition the parameters");
      offsets_[i] = unit.begin + total;
      total += params[i].numel();
    }
    unit.shard = std::max<int64_t>((total + ranks - 1) / ranks, 1);
    flat_elements_ += unit.shard * ranks;
    shard_elements_ += unit.shard;
    units_.push_back(std::move(unit));
  }
  MT_CHECK(std::none_of(offsets_.begin(), offsets_.end(), [](int64_t o) { return o < 0; }),
           "ShardLayout: every parameter must be in a unit");
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    const int64_t mine_begin = unit.begin + unit.shard * rank, mine_end = mine_begin + unit.shard;
    for (size_t i : unit.params) {
      const int64_t begin = std::max(mine_begin, offsets_[i]);
      const int64_t end = std::min(mine_end, offsets_[i] + shape_numel(shapes_[i]));
      if (end <= begin) continue;
      parts_.push_back({i, u, begin - offsets_[i], end - begin, unit.shard_begin + begin - mine_begin});
    }
  }
  std::sort(parts_.begin(), parts_.end(),
            [](const Part& a, const Part& b) { return a.param != b.param ? a.param < b.param : a.begin < b.begin; });
}

Tensor ShardLayout::flat_slice(const Tensor& flat, size_t param) const {
  return flat.narrow(0, offsets_[param], shape_numel(shapes_[param])).view(shapes_[param]);
}

Tensor ShardLayout::unit_flat(const Tensor& flat, size_t unit) const {
  return flat.narrow(0, units_[unit].begin, units_[unit].shard * ranks_);
}

Tensor ShardLayout::unit_shard(const Tensor& shards, size_t unit) const {
  return shards.narrow(0, units_[unit].shard_begin, units_[unit].shard);
}

Tensor ShardLayout::part_of(const Tensor& shards, const Part& part) const {
  return shards.narrow(0, part.shard_offset, part.length);
}

std::unique_ptr<optim::Optimizer> make_shard_optimizer(const ShardLayout& layout,
                                                       const std::vector<optim::ParamGroup>& groups,
                                                       const ShardOptimizerFactory& make,
                                                       const std::vector<Tensor>& part_views) {
  const std::vector<ShardLayout::Part>& parts = layout.parts();
  MT_CHECK(part_views.size() == parts.size(), "make_shard_optimizer: {} views for {} parts", part_views.size(),
           parts.size());
  std::vector<size_t> group_of;
  std::vector<optim::ParamGroup> shard_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    group_of.insert(group_of.end(), groups[g].params.size(), g);
    shard_groups.push_back({{}, groups[g].lr, groups[g].weight_decay});
  }
  MT_CHECK(group_of.size() == layout.param_count(), "make_shard_optimizer: the groups hold {} parameters, the layout {}",
           group_of.size(), layout.param_count());
  for (size_t k = 0; k < parts.size(); ++k) shard_groups[group_of[parts[k].param]].params.push_back(part_views[k]);
  std::unique_ptr<optim::Optimizer> shard = make(std::move(shard_groups));
  for (size_t k = 0; k < parts.size(); ++k) {
    shard->set_state_numel(part_views[k], shape_numel(layout.shape(parts[k].param)));
  }
  return shard;
}

void keep_f32_state(ShardLayout& layout, optim::Optimizer& shard, const std::vector<Tensor>& part_views,
                    const std::vector<Tensor>& params, const Tensor& param, const char* who) {
  const auto it = std::find_if(params.begin(), params.end(), [&](const Tensor& p) { return p.is_same(param); });
  MT_CHECK(it != params.end(), "{}::keep_f32_state: the parameter of shape {} is not one of its parameters", who,
           param.shape_string());
  const auto index = static_cast<size_t>(it - params.begin());
  layout.f32_state_[index] = true;
  const std::vector<ShardLayout::Part>& parts = layout.parts();
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].param == index) shard.keep_f32_state(part_views[k]);
  }
}

void skip_together(optim::Optimizer& shard, ProcessGroup& group) {
  if (group.size() == 1) return;
  ProcessGroup* ranks = &group;
  shard.set_found_inf_combiner(
      [ranks](const Tensor& found_inf) { ranks->all_reduce(found_inf, ReduceOp::Max)->wait(); });
}

Tensor clip_sharded_grad_norm_(const optim::Optimizer& shard, double max_norm, ProcessGroup& group, Device device,
                               const char* who) {
  MT_CHECK(max_norm > 0, "{}::clip_grad_norm_: max_norm must be positive, got {}", who, max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : shard.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    MT_CHECK(!g.impl()->loss_scaled, "{}::clip_grad_norm_: the gradients are still scaled; call scaler.unscale_ first",
             who);
    grads.push_back(g);
  }
  Tensor squares = zeros({1}, kF32, device);
  if (!grads.empty()) kernels::sum_of_squares(grads, squares);
  group.all_reduce(squares)->wait();
  const Tensor norm = sqrt(squares);
  if (!grads.empty()) kernels::scale_by_clip_coefficient(grads, norm, max_norm);
  return norm.reshape({});
}

optim::StateDict consolidate_optimizer_state(const ShardLayout& layout, const optim::Optimizer& shard,
                                             ProcessGroup& group, const Tensor& scratch) {
  NoGradGuard no_grad;
  const optim::StateDict local = shard.state_dict();
  optim::StateDict out;
  for (const auto& [key, value] : local) {
    if (key.rfind("group.", 0) == 0) out[key] = value;
  }
  const Device device = scratch.device();
  const std::vector<ShardLayout::Part>& parts = layout.parts();
  // Which state names exist (on some rank), and every parameter's step.
  Tensor present = zeros({4}, kF32, device);
  Tensor steps = zeros({static_cast<int64_t>(layout.param_count())}, kF32, device);
  for (size_t k = 0; k < parts.size(); ++k) {
    auto step = local.find(fmt::format("state.{}.step", k));
    if (step == local.end()) continue;
    kernels::copy(step->second, steps.narrow(0, static_cast<int64_t>(parts[k].param), 1));
    for (int n = 0; n < 4; ++n) {
      if (local.count(fmt::format("state.{}.{}", k, kStateNames[n])) > 0) fill_(present.narrow(0, n, 1), 1.0);
    }
  }
  group.all_reduce(present, ReduceOp::Max)->wait();
  group.all_reduce(steps, ReduceOp::Max)->wait();
  const std::vector<double> have = present.to(kCPU).to_vector(), step_values = steps.to(kCPU).to_vector();
  for (int n = 0; n < 4; ++n) {
    if (have[static_cast<size_t>(n)] == 0) continue;
    kernels::fill(scratch, 0.0);
    for (size_t k = 0; k < parts.size(); ++k) {
      auto it = local.find(fmt::format("state.{}.{}", k, kStateNames[n]));
      if (it == local.end()) continue;
      const ShardLayout::Part& part = parts[k];
      kernels::copy(state_values(local, it->first),
                    scratch.narrow(0, layout.offset(part.param) + part.begin, part.length));
    }
    group.all_reduce(scratch)->wait();
    for (size_t i = 0; i < layout.param_count(); ++i) {
      if (step_values[i] == 0) continue;  // never stepped: no state, as an unsharded optimizer saves it
      if (n == 0 && !(shard.has_master_weights() && low_precision(layout.dtype(i)))) continue;
      Tensor whole = empty(layout.shape(i), state_dtype(layout.dtype(i), layout.keeps_f32_state(i), shard, kStateNames[n]), device);
      kernels::copy(layout.flat_slice(scratch, i), whole);
      out[fmt::format("state.{}.{}", i, kStateNames[n])] = whole;
    }
  }
  for (size_t i = 0; i < layout.param_count(); ++i) {
    if (step_values[i] != 0) out[fmt::format("state.{}.step", i)] = full({1}, step_values[i], kF32, device);
  }
  return out;
}

void load_consolidated_optimizer_state(const ShardLayout& layout, optim::Optimizer& shard,
                                       const optim::StateDict& state, const char* who) {
  NoGradGuard no_grad;
  optim::StateDict local;
  for (const auto& [key, value] : state) {
    if (key.rfind("group.", 0) == 0) local[key] = value;
  }
  const std::vector<ShardLayout::Part>& parts = layout.parts();
  for (size_t k = 0; k < parts.size(); ++k) {
    const ShardLayout::Part& part = parts[k];
    auto step = state.find(fmt::format("state.{}.step", part.param));
    if (step == state.end()) continue;
    local[fmt::format("state.{}.step", k)] = step->second;
    for (const char* name : kStateNames) {
      auto it = state.find(fmt::format("state.{}.{}", part.param, name));
      if (it == state.end()) continue;
      const int64_t numel = shape_numel(layout.shape(part.param));
      MT_CHECK(it->second.numel() == numel, "{}: state '{}' of parameter {} has {} elements, the parameter {}", who,
               name, part.param, it->second.numel(), numel);
      local[fmt::format("state.{}.{}", k, name)] =
          state_values(state, it->first).contiguous().view({-1}).narrow(0, part.begin, part.length).contiguous();
    }
  }
  // Keys for parameters that are not this rank's are not passed on; refuse
  // what no unsharded optimizer would have written.
  for (const auto& [key, value] : state) {
    if (key.rfind("group.", 0) == 0 || key == "format.state_block") continue;
    const size_t dot = key.find('.', 6);
    MT_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos,
             "{}::load_consolidated_state_dict: unexpected key '{}'", who, key);
    const std::string index = key.substr(6, dot - 6);
    size_t param = 0;
    const auto [end, error] = std::from_chars(index.data(), index.data() + index.size(), param);
    MT_CHECK(
        error == std::errc() && end == index.data() + index.size() && !index.empty() && param < layout.param_count(),
        "{}::load_consolidated_state_dict: '{}' names no parameter (there are {})", who, key, layout.param_count());
  }
  shard.load_state_dict(local);
}

}  // namespace mt::dist
