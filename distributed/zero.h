// ZeRO stage 1 (PyTorch's ZeroRedundancyOptimizer, DeepSpeed's stage 1):
// every rank keeps the optimizer state (Adam's moments, the f32 master
// weights) of a 1/N share of the parameters only.
//
// The parameters, flattened one after another and padded to a multiple of N,
// are cut into N equal shards; rank r owns shard r. Where a shard boundary
// falls inside a parameter, each side owns its part. Per step:
//   1. reduce_gradients(): every gradient, widened to f32, into one flat
//      buffer; one reduce-scatter leaves rank r the mean of its shard;
//   2. the owner's optimizer (built by the factory over views of its parts of
//      the parameters, in their parameter groups) steps them in place,
//      through the GradScaler as usual. Each rank checks only its shard for
//      inf/NaN, so the shard optimizer all-reduces found_inf with max before
//      the step reads it (Optimizer::set_found_inf_combiner, which the
//      GradScaler calls), and every rank skips together;
//   3. gather_parameters(): one all-gather of the shards into every
//      parameter on every rank.
// Nothing overlaps backward here (stage 1 reduces at the step); what it buys
// is memory: optimizer state / N per rank, which the memory ledger shows.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/shard_layout.h"
#include "optim/optimizer.h"

namespace mt::dist {

class ShardedOptimizer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  // Broadcasts rank 0's parameters first, so every rank starts equal.
  ShardedOptimizer(const std::vector<optim::ParamGroup>& groups, const Factory& make, ProcessGroup* group = nullptr);

  void reduce_gradients();
  optim::Optimizer& shard() { return *shard_; }
  void gather_parameters();
  // The global L2 norm over every shard, clipped to max_norm (call it after
  // unscale_, as optim::clip_grad_norm_); returns the norm before clipping.
  Tensor clip_grad_norm_(double max_norm);
  void zero_grad();
  // Optimizer::keep_f32_state for one of the parameters: every rank's parts
  // of it keep f32 moments whatever the state dtype, as an unsharded
  // optimizer's embeddings do. Before the first step.
  void keep_f32_state(const Tensor& param);

  // The optimizer state as one unsharded optimizer over `groups` would save
  // it (so a checkpoint resumes with or without sharding), and its inverse.
  // Both are collectives: every rank calls them.
  optim::StateDict consolidated_state_dict();
  void load_consolidated_state_dict(const optim::StateDict& state);

  int64_t shard_elements() const { return layout_->shard_elements(); }
  const ShardLayout& layout() const { return *layout_; }

 private:
  ProcessGroup& group_;
  std::vector<Tensor> params_;           // every parameter, in the groups' order
  std::unique_ptr<ShardLayout> layout_;  // one unit: all of them
  std::vector<Tensor> part_views_;       // of the parameters' storage, in the parts' order: what the shard steps
  Tensor flat_;          // f32 [N x shard]: gradients in, parameters out
  Tensor shard_buffer_;  // f32 [shard]
  std::unique_ptr<optim::Optimizer> shard_;
};

}  // namespace mt::dist
