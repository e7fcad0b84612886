// FullyShardedDataParallel: ZeRO stages 2 and 3 (PyTorch's FSDP, DeepSpeed's
// stages 2 and 3) with a mixed-precision policy.
//
//   auto model = std::make_shared<MyNet>();
//   dist::FullyShardedDataParallel fsdp(model, {{model->parameters()}},
//       [](std::vector<optim::ParamGroup> g) { return std::make_unique<optim::AdamW>(std::move(g)); },
//       {.strategy = dist::ShardingStrategy::Full, .param_dtype = kBF16});
//   for (batch : this rank's shard) {                   // DataLoader shard_rank/shard_count
//     scaler.scale(loss_fn(fsdp.forward(x), y)).backward();
//     scaler.step(fsdp.shard()); scaler.update();       // the optimizer of this rank's shards
//     fsdp.step_done(); fsdp.zero_grad();
//   }
//
// What a rank keeps of the model: 1/N of every parameter as f32 (the master
// weights the optimizer steps), 1/N of their gradients (f32, the mean over
// the ranks) and 1/N of the optimizer state. With ShardingStrategy::Full
// (ZeRO-3) the whole parameters exist only while a unit computes; with
// GradsAndState (ZeRO-2) they stay, and only gradients and state are sharded.
//
// Units (the wrapping policy): by default each transformer block (an entry
// of an nn::ModuleList) and each stage (an nn::Sequential child of the
// model) is a unit; a model with neither makes each of its direct children
// that hold parameters one. Whatever no unit holds (embeddings, heads, final
// norms) is the root unit. A unit's parameters are one flat buffer (the
// parameters become views of it, in `param_dtype`), cut into N shards as
// shard_layout.h draws.
//
// A step, for a unit u (unit 0 runs first):
//   forward   u's ForwardScope is entered (nn::ForwardScope::Observer): wait
//             for u's all-gather (started as u-1 began: the prefetch), start
//             u+1's; on leaving, free u's gathered memory (ZeRO-3). The root
//             unit is gathered as the model's forward begins and stays until
//             backward ends.
//   backward  before the first node u's forward recorded runs (a pre-node
//             hook; nodes are told apart by their sequence numbers), gather u
//             if it is not there and start u-1's; backward writes u's
//             gradients into one buffer in `reduce_dtype` (gradient
//             destinations; copied there when param_dtype differs); when the
//             last is complete (post-accumulate-grad hooks) free u's
//             parameters and reduce-scatter the buffer, on the
//             communication thread (MPI) or stream (NCCL) while backward goes
//             on. A unit's buffer is made only when at most one other's
//             reduction is in flight (else the oldest is finished first), so
//             besides the root's at most two exist. Reduce-scatters
//             start in a fixed order (the last unit first, the root last) on
//             every rank; when backward ends, what is left starts (a
//             parameter without a gradient counts as zeros), everything is
//             waited for, and each rank's f32 shard gradients get the mean.
//   step      the shard optimizer steps the f32 shards; found_inf is
//             all-reduced with max, so every rank skips together; clipping
//             sums the shards' squared norms over the ranks.
// Activation checkpointing composes: a recomputed unit is gathered when its
// recomputation enters it and freed when its gradients are reduced.
//
// Mixed precision (PyTorch's MixedPrecision): param_dtype is the dtype the
// parameters are all-gathered and computed in (default: the parameters'
// own); reduce_dtype the gradients' reduce-scatter dtype (f32 by default: a
// BF16 sum of many ranks loses the small gradients); buffers (norm
// statistics) keep their dtype and are not sharded.
//
// Checkpoints: FullParameters points every parameter at whole f32 (own
// dtype) memory for as long as it lives, so state_dict() and
// load_state_dict() of the model work as without sharding (rank 0 writes;
// a loaded state is written back into the shards); consolidated_state_dict()
// is the optimizer's as one unsharded optimizer would save it. Such a
// checkpoint resumes at any world size, sharded or not.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/shard_layout.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mt::dist {

enum class ShardingStrategy {
  GradsAndState,  // ZeRO-2: gradients and optimizer state sharded; parameters whole on every rank
  Full,           // ZeRO-3: parameters sharded too, gathered per unit when needed
};

// Whether the module named `name` (a dotted path below the model) is a unit.
using WrapPolicy = std::function<bool(const std::string& name, const nn::Module& module)>;
// The default: see the header comment (blocks, stages, or the model's children).
WrapPolicy default_wrap_policy(const nn::Module& model);

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::Full;
  std::optional<DType> param_dtype{};  // the gathered parameters' dtype; the parameters' own when unset
  DType reduce_dtype = kF32;           // the gradients' reduce-scatter dtype
  bool prefetch = true;                // gather the next unit while this one computes
  WrapPolicy wrap{};                   // null: default_wrap_policy(module)
};

class FullyShardedDataParallel final : public nn::Module, private nn::ForwardScope::Observer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  // `groups` hold every parameter of `module` (the optimizer's groups, whose
  // order the consolidated optimizer state follows). Rank 0's parameters and
  // buffers are broadcast first, so every rank starts equal. `group`: null
  // means group_for(the parameters' device).
  FullyShardedDataParallel(std::shared_ptr<nn::Module> module, const std::vector<optim::ParamGroup>& groups,
                           const Factory& make, FsdpOptions options = {}, ProcessGroup* group = nullptr);
  ~FullyShardedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  Tensor forward_loss(const Tensor& input, const Tensor& targets) override;
  nn::Module& module() { return *module_; }
  const nn::Module& module() const { return *module_; }
  std::string name() const override { return "FullyShardedDataParallel"; }

  // The optimizer over this rank's f32 shards (scaler.step and unscale_ take it).
  optim::Optimizer& shard() { return *shard_; }
  // The global L2 norm over every shard, clipped to max_norm (after unscale_).
  Tensor clip_grad_norm_(double max_norm);
  // After the optimizer step: the gathered parameters are out of date
  // (ZeRO-2 gathers them again now; ZeRO-3 at the next forward).
  void step_done();
  void zero_grad();
  // Optimizer::keep_f32_state for one of the parameters: every rank's parts
  // of it keep f32 moments whatever the state dtype, as an unsharded
  // optimizer's embeddings do. Before the first step.
  void keep_f32_state(const Tensor& param);

  // For as long as it lives, every parameter of the module is whole, in its
  // own dtype, holding the shards' values; with `write_back` what it holds
  // when destroyed goes back into the shards. A collective: every rank makes
  // one, and no forward runs meanwhile.
  class FullParameters {
   public:
    explicit FullParameters(FullyShardedDataParallel& fsdp, bool write_back = false);
    ~FullParameters();
    FullParameters(const FullParameters&) = delete;
    FullParameters& operator=(const FullParameters&) = delete;

   private:
    struct Saved {
      std::shared_ptr<Storage> storage;
      int64_t offset;
      DType dtype;
    };
    FullyShardedDataParallel& fsdp_;
    bool write_back_;
    std::vector<Saved> saved_;
  };
  // This rank's f32 shards of every unit (the master weights) as they are,
  // for sharded checkpoints, and their inverse (values of another layout
  // are an mt::Error). Not collectives.
  const Tensor& master_shard() const { return master_; }
  void load_master_shard(const Tensor& values);
  // The optimizer state as one unsharded optimizer over `groups` would save
  // it, and its inverse: collectives.
  optim::StateDict consolidated_state_dict();
  void load_consolidated_state_dict(const optim::StateDict& state);

  // The units' parameter names (the root unit, what no wrapped module
  // holds, last) and the elements of each rank's shard of each.
  std::vector<std::vector<std::string>> unit_parameters() const;
  std::vector<int64_t> unit_shard_elements() const;
  const ShardLayout& layout() const { return *layout_; }
  ShardingStrategy strategy() const { return options_.strategy; }
  DType reduce_dtype() const { return options_.reduce_dtype; }
  // How many units' parameters are gathered now, and the most at once since
  // construction (or since reset_peak_gathered): with prefetching, at most
  // the root and two units in a forward or a backward.
  int gathered_units() const;
  int peak_gathered_units() const { return peak_gathered_; }
  void reset_peak_gathered() { peak_gathered_ = gathered_units(); }
  // Counts since construction: all-gathers and reduce-scatters started, and
  // how often a forward or backward found the unit it needed already
  // gathered or on its way (prefetched) rather than having to start it.
  struct Stats {
    int64_t gathers = 0;
    int64_t reduce_scatters = 0;
    int64_t found_prefetched = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Unit {
    const nn::Module* module = nullptr;  // null for the root unit
    std::vector<size_t> params;          // indices into params_
    std::shared_ptr<Storage> storage;    // the gathered parameters: param_dtype, N x shard
    Tensor gathered;                     // a flat view of it
    Tensor send;                         // this rank's shard in param_dtype, for the all-gather
    std::shared_ptr<Work> gather;        // in flight
    bool resident = false;               // storage holds the parameters
    bool changed = false;                // the shards stepped since the last gather
    uint64_t version = 0;                // the storage's version before the gather in flight
    int64_t ready = 0;                   // parameters whose gradient this backward completed
    int64_t needs_grad = 0;              // parameters that get one
    bool reduced = false;                // its reduce-scatter has started in this backward
    Tensor reduce_in, reduce_out;        // reduce_dtype: N x shard, shard
    std::shared_ptr<Work> reduce;
  };
  // The nodes a unit's forward recorded: sequence numbers [first, end).
  struct Range {
    uint64_t first, end;
    size_t unit;
  };

  void take_parameters(const std::vector<optim::ParamGroup>& groups);
  std::vector<std::vector<size_t>> choose_units();
  void shard_parameters();
  void install_hooks();
  void entering(const nn::Module& module) override;
  void leaving(const nn::Module& module) noexcept override;
  void before_node(const autograd::Node& node);
  void gradient_ready(size_t unit);

  size_t root() const { return units_.size() - 1; }
  void start_gather(size_t unit);
  void ensure_gathered(size_t unit);
  void prefetch(size_t unit);
  void free_unit(size_t unit);
  void note_backward();
  void launch_ready_reductions();
  Tensor reduce_buffer(size_t unit);
  Tensor grad_destination(size_t unit, size_t param);
  void launch_reduction(size_t unit);
  void finish_reduction(size_t unit);
  void finish_backward();
  static constexpr size_t kReductionsInFlight = 2;

  std::shared_ptr<nn::Module> module_;
  FsdpOptions options_;
  Device device_;  // before group_: the group follows the parameters' device
  ProcessGroup& group_;
  DType param_dtype_;
  std::vector<Tensor> params_;  // the optimizer groups' order; their impls point into the units' storage
  std::vector<std::string> names_;
  std::vector<Unit> units_;  // wrapped units in forward order, the root last
  std::unordered_map<const nn::Module*, size_t> unit_of_module_;
  std::unique_ptr<ShardLayout> layout_;
  Tensor master_;  // f32, this rank's shards: the optimizer steps views of it
  Tensor grads_;   // f32, their gradients: the mean over the ranks, summed over backwards until zero_grad
  bool grads_valid_ = false;
  std::vector<Tensor> part_views_;  // of master_, in the parts' order
  std::unique_ptr<optim::Optimizer> shard_;
  std::vector<Range> ranges_;
  std::vector<std::pair<size_t, uint64_t>> open_units_;  // units whose forward is running, and its first node
  std::vector<size_t> reduce_order_;                     // the last unit first, the root last
  size_t next_reduce_ = 0;                               // into reduce_order_
  std::deque<size_t> in_flight_;                         // reductions started, not yet finished
  bool in_backward_ = false;
  bool scaled_ = false;  // this backward's gradients carry the loss scale
  bool summoned_ = false;
  int peak_gathered_ = 0;
  Stats stats_;
  std::vector<uint64_t> hooks_;
};

}  // namespace mt::dist
