// How ZeRO-1 (zero.h) and fully sharded data parallel (fsdp.h) cut the
// parameters into rank shards, and what both do with the shards: build the
// optimizer over this rank's parts, make found_inf and the gradient norm
// global, and save the optimizer state as one unsharded optimizer would.
//
// The parameters are grouped into units (ZeRO-1: one unit of them all; FSDP:
// each transformer block or resnet stage, and the rest). A unit's parameters
// are flattened one after another, padded to a multiple of N and cut into N
// equal shards; rank r owns shard r of every unit. Where a shard boundary
// falls inside a parameter, each side owns its part.
//
//   global flat layout   [ unit 0: N x s0 ][ unit 1: N x s1 ] ...
//   rank r's shards      [ unit 0's r-th s0 ][ unit 1's r-th s1 ] ...
//
// The layout keeps each parameter's shape and dtype as they were when it was
// made (FSDP later points the parameters at gathered memory of another dtype).
#pragma once

#include <functional>
#include <vector>

#include "distributed/process_group.h"
#include "optim/optimizer.h"

namespace mt::dist {

class ShardLayout {
  friend void keep_f32_state(ShardLayout&, optim::Optimizer&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                             const Tensor&, const char*);

 public:
  struct Unit {
    std::vector<size_t> params;  // indices into the parameters, in flat order
    int64_t begin = 0;           // in the global flat layout
    int64_t shard = 0;           // elements of each rank's shard (the unit pads to N x shard)
    int64_t shard_begin = 0;     // in this rank's shards
  };
  // A piece of one parameter that this rank owns.
  struct Part {
    size_t param = 0;
    size_t unit = 0;
    int64_t begin = 0;  // within the flattened parameter
    int64_t length = 0;
    int64_t shard_offset = 0;  // in this rank's shards
  };

  // `params` in the optimizer groups' order; `units` partition their indices.
  ShardLayout(const std::vector<Tensor>& params, std::vector<std::vector<size_t>> units, int rank, int ranks);

  size_t param_count() const { return shapes_.size(); }
  const Shape& shape(size_t param) const { return shapes_[param]; }
  DType dtype(size_t param) const { return dtypes_[param]; }
  int64_t offset(size_t param) const { return offsets_[param]; }  // in the global flat layout
  const std::vector<Unit>& units() const { return units_; }
  // This rank's parts by parameter index, then position: the order of the
  // shard optimizer's parameters (make_shard_optimizer).
  const std::vector<Part>& parts() const { return parts_; }
  int64_t flat_elements() const { return flat_elements_; }    // sum over units of N x shard
  int64_t shard_elements() const { return shard_elements_; }  // sum over units of shard
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  // Parameters whose optimizer state stays f32 whatever the state dtype
  // (keep_f32_state below): their consolidated state is f32 too.
  bool keeps_f32_state(size_t param) const { return f32_state_[param]; }

  // Views: a parameter's elements of a global flat tensor (in its shape), a
  // unit's N x shard of it, a unit's shard of this rank's shards, a part's.
  Tensor flat_slice(const Tensor& flat, size_t param) const;
  Tensor unit_flat(const Tensor& flat, size_t unit) const;
  Tensor unit_shard(const Tensor& shards, size_t unit) const;
  Tensor part_of(const Tensor& shards, const Part& part) const;

 private:
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::vector<int64_t> offsets_;
  std::vector<Unit> units_;
  std::vector<Part> parts_;
  std::vector<bool> f32_state_;
  int64_t flat_elements_ = 0, shard_elements_ = 0;
  int rank_ = 0, ranks_ = 1;
};

// The shard optimizer: `make` over this rank's parts (part_views, in the
// parts' order), each in its parameter's group with that group's lr and
// decay (the groups holding the layout's parameters). Each part's state format
// is the one its whole parameter would get from an unsharded optimizer: 8-bit
// or not by the whole parameter's size (Optimizer::set_state_numel), so
// checkpoints and the memory theory are the same at every world size.
using ShardOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
std::unique_ptr<optim::Optimizer> make_shard_optimizer(const ShardLayout& layout,
                                                       const std::vector<optim::ParamGroup>& groups,
                                                       const ShardOptimizerFactory& make,
                                                       const std::vector<Tensor>& part_views);

// Optimizer::keep_f32_state for `param`, one of the layout's `params` (an
// embedding: bitsandbytes' "stable embedding" lesson): each of this rank's
// parts of it, and its consolidated state. Before the first step; `who`
// names the caller in errors.
void keep_f32_state(ShardLayout& layout, optim::Optimizer& shard, const std::vector<Tensor>& part_views,
                    const std::vector<Tensor>& params, const Tensor& param, const char* who);

// Each rank checks only its shard's gradients for inf/NaN: the shard
// optimizer all-reduces found_inf with max before the step reads it
// (Optimizer::set_found_inf_combiner, which the GradScaler calls), so every
// rank skips together. Nothing in a world of one.
void skip_together(optim::Optimizer& shard, ProcessGroup& group);

// optim::clip_grad_norm_'s fused kernels over the shard optimizer's
// gradients, the squared norms summed over the ranks in between: the global
// norm (returned, before clipping). `who` names the caller in errors.
Tensor clip_sharded_grad_norm_(const optim::Optimizer& shard, double max_norm, ProcessGroup& group, Device device,
                               const char* who);

// The optimizer state as one unsharded optimizer over the layout's
// parameters would save it (a checkpoint then resumes with or without
// sharding, at any world size), and its inverse. Collectives: every rank
// calls them. `scratch`: f32 of flat_elements() on the parameters' device.
optim::StateDict consolidate_optimizer_state(const ShardLayout& layout, const optim::Optimizer& shard,
                                             ProcessGroup& group, const Tensor& scratch);
void load_consolidated_optimizer_state(const ShardLayout& layout, optim::Optimizer& shard,
                                       const optim::StateDict& state, const char* who);

}  // namespace mt::dist
