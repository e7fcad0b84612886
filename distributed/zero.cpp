#include "distributed/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/backends.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/optim/optim.h"

namespace mt::dist {
namespace {

const char* const kStateNames[] = {"master", "exp_avg", "exp_avg_sq", "momentum_buffer"};

// The dtype a consolidated state tensor is saved in: BF16 moments as they
// are; 8-bit moments as their f32 values (a shard's blocks begin where its
// part of the parameter does, so the codes of different ranks do not make
// one tensor's blocks: the unsharded optimizer requantizes them on load).
DType state_dtype(const Tensor& param, const optim::Optimizer& opt, const std::string& name) {
  if (name != "master" && param.dtype() != kF64 && opt.precision().state_dtype == optim::StateDtype::BF16) {
    return kBF16;
  }
  const bool low = param.dtype() == kF16 || param.dtype() == kBF16;
  if (name == "master" || param.dtype() == kF32 || (opt.has_master_weights() && low)) return kF32;
  if (opt.precision().state_dtype == optim::StateDtype::Int8) return kF32;
  return param.dtype();
}

// A state tensor of `state` as values: 8-bit codes dequantized (on the CPU:
// a shard's blocks, or a whole tensor's, do not line up with this rank's
// part), the rest as they are.
Tensor state_values(const optim::StateDict& state, const std::string& key) {
  const Tensor& stored = state.at(key);
  return state.count(key + ".absmax") == 0 ? stored : optim::moment_values(state, key).to(stored.device());
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const std::vector<optim::ParamGroup>& groups, const Factory& make,
                                   ProcessGroup* group)
    : group_(group != nullptr ? *group : world()) {
  NoGradGuard no_grad;
  std::vector<size_t> group_of;
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& p : groups[g].params) {
      MT_CHECK(p.is_contiguous(), "ShardedOptimizer: parameters must be contiguous");
      params_.push_back(p);
      offsets_.push_back(total);
      group_of.push_back(g);
      total += p.numel();
    }
  }
  MT_CHECK(!params_.empty(), "ShardedOptimizer: no parameters");
  const Device device = params_.front().device();
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& p : params_) works.push_back(group_.broadcast(p, 0));
  for (auto& w : works) w->wait();

  const int64_t ranks = group_.size();
  shard_elements_ = (total + ranks - 1) / ranks;
  const int64_t mine_begin = shard_elements_ * group_.rank(), mine_end = std::min(total, mine_begin + shard_elements_);
  std::vector<optim::ParamGroup> shard_groups;
  for (const optim::ParamGroup& g : groups) shard_groups.push_back({{}, g.lr, g.weight_decay});
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t begin = std::max(mine_begin, offsets_[i]);
    const int64_t end = std::min(mine_end, offsets_[i] + params_[i].numel());
    if (end <= begin) continue;
    Tensor view = params_[i].view({-1}).narrow(0, begin - offsets_[i], end - begin);
    parts_.push_back({i, begin - offsets_[i], end - begin, view});
    shard_groups[group_of[i]].params.push_back(view);
  }
  const MemoryCategoryScope gradients(MemoryCategory::Gradients);
  flat_ = empty({shard_elements_ * ranks}, kF32, device);
  shard_buffer_ = empty({shard_elements_}, kF32, device);
  shard_ = make(std::move(shard_groups));
  // Each rank checks only its shard's gradients for inf/NaN: all skip if any found one.
  if (ranks > 1) {
    ProcessGroup* ranks_group = &group_;
    shard_->set_found_inf_combiner(
        [ranks_group](const Tensor& found_inf) { ranks_group->all_reduce(found_inf, ReduceOp::Max)->wait(); });
  }
}

Tensor ShardedOptimizer::flat_slice(const Tensor& flat, size_t param) const {
  return flat.narrow(0, offsets_[param], params_[param].numel()).view(params_[param].sizes());
}

void ShardedOptimizer::reduce_gradients() {
  NoGradGuard no_grad;
  bool scaled = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) {
      kernels::copy(g, flat_slice(flat_, i));
      scaled = scaled || g.impl()->loss_scaled;
    } else {
      kernels::fill(flat_slice(flat_, i), 0.0);  // another rank's batch may have reached it
    }
  }
  const int64_t total = offsets_.back() + params_.back().numel();
  if (flat_.numel() > total) kernels::fill(flat_.narrow(0, total, flat_.numel() - total), 0.0);
  group_.reduce_scatter(shard_buffer_, flat_)->wait();
  detail::divide_in_place({shard_buffer_}, group_.size());  // the sum becomes the mean
  const int64_t mine_begin = shard_elements_ * group_.rank();
  for (Part& part : parts_) {
    Tensor grad = shard_buffer_.narrow(0, offsets_[part.param] + part.begin - mine_begin, part.length);
    if (part.view.dtype() != kF32) {  // f32 parameters use the shard buffer itself (until the gather)
      Tensor own = empty({part.length}, part.view.dtype(), part.view.device());
      tag_memory(own, MemoryCategory::Gradients);
      kernels::copy(grad, own);
      grad = own;
    }
    part.view.impl()->grad = grad.impl_ptr();
    grad.impl()->loss_scaled = scaled;
  }
}

void ShardedOptimizer::gather_parameters() {
  NoGradGuard no_grad;
  // The shard buffer is about to hold parameters: the gradients that live in it are spent.
  for (const Part& part : parts_) part.view.impl()->grad.reset();
  const int64_t mine_begin = shard_elements_ * group_.rank();
  for (const Part& part : parts_) {
    kernels::copy(part.view, shard_buffer_.narrow(0, offsets_[part.param] + part.begin - mine_begin, part.length));
  }
  group_.all_gather(flat_, shard_buffer_)->wait();
  for (size_t i = 0; i < params_.size(); ++i) {
    kernels::copy(flat_slice(flat_, i), params_[i]);
    params_[i].storage()->bump_version();
  }
}

// optim::clip_grad_norm_'s fused kernels, with the squared norms of the
// shards summed over the ranks in between.
Tensor ShardedOptimizer::clip_grad_norm_(double max_norm) {
  MT_CHECK(max_norm > 0, "ShardedOptimizer::clip_grad_norm_: max_norm must be positive, got {}", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Part& part : parts_) {
    const Tensor g = part.view.grad();
    if (!g.defined()) continue;
    MT_CHECK(!g.impl()->loss_scaled,
             "ShardedOptimizer::clip_grad_norm_: the gradients are still scaled; call scaler.unscale_ first");
    grads.push_back(g);
  }
  Tensor squares = zeros({1}, kF32, shard_buffer_.device());
  if (!grads.empty()) kernels::sum_of_squares(grads, squares);
  group_.all_reduce(squares)->wait();
  const Tensor norm = sqrt(squares);
  if (!grads.empty()) kernels::scale_by_clip_coefficient(grads, norm, max_norm);
  return norm.reshape({});
}

void ShardedOptimizer::zero_grad() {
  shard_->zero_grad();
  for (const Tensor& p : params_) p.impl()->grad.reset();
}

optim::StateDict ShardedOptimizer::consolidated_state_dict() {
  NoGradGuard no_grad;
  const optim::StateDict local = shard_->state_dict();
  optim::StateDict out;
  for (const auto& [key, value] : local) {
    if (key.rfind("group.", 0) == 0) out[key] = value;
  }
  const Device device = shard_buffer_.device();
  // Which state names exist (on some rank), and every parameter's step.
  Tensor present = zeros({4}, kF32, device);
  Tensor steps = zeros({static_cast<int64_t>(params_.size())}, kF32, device);
  for (size_t k = 0; k < parts_.size(); ++k) {
    auto step = local.find(fmt::format("state.{}.step", k));
    if (step == local.end()) continue;
    kernels::copy(step->second, steps.narrow(0, static_cast<int64_t>(parts_[k].param), 1));
    for (int n = 0; n < 4; ++n) {
      if (local.count(fmt::format("state.{}.{}", k, kStateNames[n])) > 0) fill_(present.narrow(0, n, 1), 1.0);
    }
  }
  group_.all_reduce(present, ReduceOp::Max)->wait();
  group_.all_reduce(steps, ReduceOp::Max)->wait();
  const std::vector<double> have = present.to(kCPU).to_vector(), step_values = steps.to(kCPU).to_vector();
  for (int n = 0; n < 4; ++n) {
    if (have[static_cast<size_t>(n)] == 0) continue;
    kernels::fill(flat_, 0.0);
    for (size_t k = 0; k < parts_.size(); ++k) {
      auto it = local.find(fmt::format("state.{}.{}", k, kStateNames[n]));
      if (it == local.end()) continue;
      const Part& part = parts_[k];
      kernels::copy(state_values(local, it->first), flat_.narrow(0, offsets_[part.param] + part.begin, part.length));
    }
    group_.all_reduce(flat_)->wait();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (step_values[i] == 0) continue;  // never stepped: no state, as an unsharded optimizer saves it
      if (n == 0 && !(shard_->has_master_weights() && (params_[i].dtype() == kF16 || params_[i].dtype() == kBF16)))
        continue;
      Tensor whole = empty(params_[i].sizes(), state_dtype(params_[i], *shard_, kStateNames[n]), device);
      kernels::copy(flat_slice(flat_, i), whole);
      out[fmt::format("state.{}.{}", i, kStateNames[n])] = whole;
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (step_values[i] != 0) out[fmt::format("state.{}.step", i)] = full({1}, step_values[i], kF32, device);
  }
  return out;
}

void ShardedOptimizer::load_consolidated_state_dict(const optim::StateDict& state) {
  NoGradGuard no_grad;
  optim::StateDict local;
  for (const auto& [key, value] : state) {
    if (key.rfind("group.", 0) == 0) local[key] = value;
  }
  for (size_t k = 0; k < parts_.size(); ++k) {
    const Part& part = parts_[k];
    auto step = state.find(fmt::format("state.{}.step", part.param));
    if (step == state.end()) continue;
    local[fmt::format("state.{}.step", k)] = step->second;
    for (const char* name : kStateNames) {
      auto it = state.find(fmt::format("state.{}.{}", part.param, name));
      if (it == state.end()) continue;
      MT_CHECK(it->second.numel() == params_[part.param].numel(),
               "ShardedOptimizer: state '{}' of parameter {} has {} elements, the parameter {}", name, part.param,
               it->second.numel(), params_[part.param].numel());
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
             "ShardedOptimizer::load_consolidated_state_dict: unexpected key '{}'", key);
    const std::string index = key.substr(6, dot - 6);
    size_t param = 0;
    const auto [end, error] = std::from_chars(index.data(), index.data() + index.size(), param);
    MT_CHECK(error == std::errc() && end == index.data() + index.size() && !index.empty() && param < params_.size(),
             "ShardedOptimizer::load_consolidated_state_dict: '{}' names no parameter (there are {})", key,
             params_.size());
  }
  shard_->load_state_dict(local);
}

}  // namespace mt::dist
