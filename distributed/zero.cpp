#include "distributed/zero.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/backends.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::dist {

ShardedOptimizer::ShardedOptimizer(const std::vector<optim::ParamGroup>& groups, const Factory& make,
                                   ProcessGroup* group)
    : group_(group != nullptr ? *group : world()) {
  NoGradGuard no_grad;
  for (const optim::ParamGroup& g : groups) {
    for (const Tensor& p : g.params) {
      MT_CHECK(p.is_contiguous(), "ShardedOptimizer: parameters must be contiguous");
      params_.push_back(p);
    }
  }
  MT_CHECK(!params_.empty(), "ShardedOptimizer: no parameters");
  const Device device = params_.front().device();
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& p : params_) works.push_back(group_.broadcast(p, 0));
  for (auto& w : works) w->wait();

  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  layout_ = std::make_unique<ShardLayout>(params_, std::vector<std::vector<size_t>>{all}, group_.rank(), group_.size());
  const MemoryCategoryScope gradients(MemoryCategory::Gradients);
  flat_ = empty({layout_->flat_elements()}, kF32, device);
  shard_buffer_ = empty({layout_->shard_elements()}, kF32, device);
  for (const ShardLayout::Part& part : layout_->parts()) {
    part_views_.push_back(params_[part.param].view({-1}).narrow(0, part.begin, part.length));
  }
  shard_ = make_shard_optimizer(*layout_, groups, make, part_views_);
  skip_together(*shard_, group_);
}

void ShardedOptimizer::reduce_gradients() {
  NoGradGuard no_grad;
  bool scaled = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) {
      kernels::copy(g, layout_->flat_slice(flat_, i));
      scaled = scaled || g.impl()->loss_scaled;
    } else {
      kernels::fill(layout_->flat_slice(flat_, i), 0.0);  // another rank's batch may have reached it
    }
  }
  const int64_t used = layout_->offset(params_.size() - 1) + params_.back().numel();
  if (flat_.numel() > used) kernels::fill(flat_.narrow(0, used, flat_.numel() - used), 0.0);  // the padding
  group_.reduce_scatter(shard_buffer_, flat_)->wait();
  detail::divide_in_place({shard_buffer_}, group_.size());  // the sum becomes the mean
  const std::vector<ShardLayout::Part>& parts = layout_->parts();
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& view = part_views_[k];
    Tensor grad = layout_->part_of(shard_buffer_, parts[k]);
    if (view.dtype() != kF32) {  // f32 parameters use the shard buffer itself (until the gather)
      Tensor own = empty({parts[k].length}, view.dtype(), view.device());
      tag_memory(own, MemoryCategory::Gradients);
      kernels::copy(grad, own);
      grad = own;
    }
    view.impl()->grad = grad.impl_ptr();
    grad.impl()->loss_scaled = scaled;
  }
}

void ShardedOptimizer::gather_parameters() {
  NoGradGuard no_grad;
  // The shard buffer is about to hold parameters: the gradients that live in it are spent.
  for (const Tensor& view : part_views_) view.impl()->grad.reset();
  const std::vector<ShardLayout::Part>& parts = layout_->parts();
  for (size_t k = 0; k < parts.size(); ++k) kernels::copy(part_views_[k], layout_->part_of(shard_buffer_, parts[k]));
  group_.all_gather(flat_, shard_buffer_)->wait();
  for (size_t i = 0; i < params_.size(); ++i) {
    kernels::copy(layout_->flat_slice(flat_, i), params_[i]);
    params_[i].storage()->bump_version();
  }
}

Tensor ShardedOptimizer::clip_grad_norm_(double max_norm) {
  return clip_sharded_grad_norm_(*shard_, max_norm, group_, shard_buffer_.device(), "ShardedOptimizer");
}

void ShardedOptimizer::zero_grad() {
  shard_->zero_grad();
  for (const Tensor& p : params_) p.impl()->grad.reset();
}

optim::StateDict ShardedOptimizer::consolidated_state_dict() {
  return consolidate_optimizer_state(*layout_, *shard_, group_, flat_);
}

void ShardedOptimizer::load_consolidated_state_dict(const optim::StateDict& state) {
  load_consolidated_optimizer_state(*layout_, *shard_, state, "ShardedOptimizer");
}

void ShardedOptimizer::keep_f32_state(const Tensor& param) {
  dist::keep_f32_state(*layout_, *shard_, part_views_, params_, param, "ShardedOptimizer");
}

}  // namespace mt::dist
