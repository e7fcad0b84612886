#include "distributed/fsdp.h"

#include <algorithm>
#include <set>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "distributed/backends.h"
#include "distributed/ddp.h"
#include "kernels/elementwise/elementwise.h"
#include "nn/layers.h"

namespace mt::dist {
namespace {

bool holds_parameters(const nn::Module& m) { return !m.named_parameters().empty(); }

// A flat tensor over all of `storage`.
Tensor flat_over(const std::shared_ptr<Storage>& storage, int64_t numel, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->sizes = {numel};
  impl->strides = {1};
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

// Which wrapped module (by name) holds the parameter called `param`, or "" for the root.
std::string unit_name_of(const std::string& param, const std::vector<std::string>& unit_names) {
  for (const std::string& u : unit_names) {
    if (param.size() > u.size() && param.compare(0, u.size(), u) == 0 && param[u.size()] == '.') return u;
  }
  return "";
}

}  // namespace

WrapPolicy default_wrap_policy(const nn::Module& model) {
  std::set<const nn::Module*> units;
  for (const auto& [name, child] : model.children()) {
    if (dynamic_cast<const nn::Sequential*>(child.get()) != nullptr) units.insert(child.get());  // a stage
  }
  const std::function<void(const nn::Module&)> blocks = [&](const nn::Module& m) {
    const bool list = dynamic_cast<const nn::ModuleList*>(&m) != nullptr;
    for (const auto& [name, child] : m.children()) {
      if (list) {
        units.insert(child.get());  // a block
      } else {
        blocks(*child);
      }
    }
  };
  blocks(model);
  if (units.empty()) {
    for (const auto& [name, child] : model.children()) {
      if (holds_parameters(*child)) units.insert(child.get());
    }
  }
  return [units](const std::string&, const nn::Module& m) { return units.count(&m) > 0; };
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                   const std::vector<optim::ParamGroup>& groups, const Factory& make,
                                                   FsdpOptions options, ProcessGroup* group)
    : module_(std::move(module)),
      options_(std::move(options)),
      device_(parameters_device(*module_, "FullyShardedDataParallel")),
      group_(group != nullptr ? *group : group_for(device_)) {
  NoGradGuard no_grad;
  register_module("module", module_);
  take_parameters(groups);
  start_from_rank0(*module_, group_, "FullyShardedDataParallel");
  layout_ = std::make_unique<ShardLayout>(params_, choose_units(), group_.rank(), group_.size());
  shard_parameters();
  for (const ShardLayout::Part& part : layout_->parts()) part_views_.push_back(layout_->part_of(master_, part));
  shard_ = make_shard_optimizer(*layout_, groups, make, part_views_);
  skip_together(*shard_, group_);
  install_hooks();
}

// The optimizer groups' parameters, which must be all of the module's, in one dtype.
void FullyShardedDataParallel::take_parameters(const std::vector<optim::ParamGroup>& groups) {
  std::unordered_map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, p] : module_->named_parameters()) name_of[p.impl()] = name;
  for (const optim::ParamGroup& g : groups) {
    for (const Tensor& p : g.params) {
      auto it = name_of.find(p.impl());
      MT_CHECK(it != name_of.end(),
               "FullyShardedDataParallel: a parameter of the optimizer groups ({}) is not the "
               "module's",
               p.shape_string());
      MT_CHECK(p.is_contiguous(), "FullyShardedDataParallel: parameters must be contiguous ({})", it->second);
      params_.push_back(p);
      names_.push_back(it->second);
      name_of.erase(it);
    }
  }
  MT_CHECK(name_of.empty(), "FullyShardedDataParallel: the optimizer groups leave out '{}' (and {} more)",
           name_of.empty() ? std::string() : name_of.begin()->second, name_of.size() - 1);
  for (size_t i = 0; i < params_.size(); ++i) {
    MT_CHECK(params_[i].dtype() == params_.front().dtype(),
             "FullyShardedDataParallel: every parameter must have one dtype ('{}' is {}, '{}' {}); the f32 shards "
             "are the master weights, and param_dtype sets what the gathered parameters compute in",
             names_[i], params_[i].dtype(), names_.front(), params_.front().dtype());
  }
  param_dtype_ = options_.param_dtype.value_or(params_.front().dtype());
  MT_CHECK(is_floating(param_dtype_) && param_dtype_ != kF64 && is_floating(options_.reduce_dtype) &&
               options_.reduce_dtype != kF64,
           "FullyShardedDataParallel: param_dtype and reduce_dtype must be f32, f16 or bf16");
}

// The wrapped units, in the order their first parameter was registered (the
// forward order), and the root last; their parameters' indices for the layout.
std::vector<std::vector<size_t>> FullyShardedDataParallel::choose_units() {
  const WrapPolicy wrap = options_.wrap ? options_.wrap : default_wrap_policy(*module_);
  std::vector<std::pair<std::string, const nn::Module*>> wrapped;
  for (const auto& [name, m] : module_->named_modules()) {
    if (name.empty() || !wrap(name, *m) || !holds_parameters(*m)) continue;
    for (const auto& [outer, unused] : wrapped) {
      MT_CHECK(name.rfind(outer + ".", 0) != 0, "FullyShardedDataParallel: unit '{}' lies inside unit '{}'", name,
               outer);
    }
    wrapped.emplace_back(name, m);
  }
  std::vector<std::string> unit_names;
  for (const auto& [name, m] : wrapped) unit_names.push_back(name);
  std::unordered_map<std::string, size_t> index_of_name;
  for (size_t i = 0; i < params_.size(); ++i) index_of_name[names_[i]] = i;
  std::vector<std::string> order;  // unit names in forward order
  std::unordered_map<std::string, std::vector<size_t>> members;
  for (const auto& [name, p] : module_->named_parameters()) {
    const std::string unit = unit_name_of(name, unit_names);
    if (!unit.empty() && members.count(unit) == 0) order.push_back(unit);
    members[unit].push_back(index_of_name.at(name));
  }
  std::vector<std::vector<size_t>> layout_units;
  for (const std::string& unit : order) {
    const auto it = std::find(unit_names.begin(), unit_names.end(), unit);
    units_.emplace_back();
    units_.back().module = wrapped[static_cast<size_t>(it - unit_names.begin())].second;
    unit_of_module_[units_.back().module] = units_.size() - 1;
    layout_units.push_back(members[unit]);
  }
  units_.emplace_back();                // the root
  layout_units.push_back(members[""]);  // may be empty: a model of blocks only
  unit_of_module_[module_.get()] = root();
  for (size_t u = 0; u < units_.size(); ++u) units_[u].params = layout_units[u];
  for (size_t u = root(); u-- > 0;) reduce_order_.push_back(u);
  reduce_order_.push_back(root());
  return layout_units;
}

// This rank's shards become the f32 master weights, and each unit's
// parameters views of one flat buffer in param_dtype (gathered at once
// under ZeRO-2, when needed under ZeRO-3).
void FullyShardedDataParallel::shard_parameters() {
  {
    const MemoryCategoryScope parameters(MemoryCategory::Parameters);
    master_ = empty({layout_->shard_elements()}, kF32, device_);
  }
  for (const ShardLayout::Part& part : layout_->parts()) {
    kernels::copy(params_[part.param].view({-1}).narrow(0, part.begin, part.length), layout_->part_of(master_, part));
  }
  {
    const MemoryCategoryScope gradients(MemoryCategory::Gradients);
    grads_ = empty({layout_->shard_elements()}, kF32, device_);
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    const ShardLayout::Unit& lu = layout_->units()[u];
    const int64_t numel = lu.shard * group_.size();
    {
      const MemoryCategoryScope parameters(MemoryCategory::Parameters);
      unit.storage = std::make_shared<Storage>(static_cast<size_t>(numel) * element_size(param_dtype_), device_);
    }
    unit.gathered = flat_over(unit.storage, numel, param_dtype_, device_);
    for (size_t i : unit.params) {
      TensorImpl& impl = *params_[i].impl();
      impl.storage = unit.storage;
      impl.offset = layout_->offset(i) - lu.begin;
      impl.dtype = param_dtype_;
      if (impl.requires_grad) ++unit.needs_grad;
    }
    unit.storage->release_memory();
  }
  if (options_.strategy == ShardingStrategy::GradsAndState) {
    for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
  }
}

// Each parameter's gradient into its unit's buffer, the unit's reduction
// when the last is in, the gathers before backward reaches a unit, and the
// forward's enter and leave of every module.
void FullyShardedDataParallel::install_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i : units_[u].params) {
      if (!params_[i].requires_grad()) continue;
      hooks_.push_back(
          autograd::register_post_accumulate_grad_hook(params_[i], [this, u](const Tensor&) { gradient_ready(u); }));
      hooks_.push_back(autograd::register_grad_destination(
          params_[i], [this, u, i](const Tensor&) { return grad_destination(u, i); }));
    }
  }
  hooks_.push_back(autograd::register_pre_node_hook([this](const autograd::Node& n) { before_node(n); }));
  nn::ForwardScope::add_observer(this);
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  nn::ForwardScope::remove_observer(this);
  for (uint64_t h : hooks_) autograd::remove_hook(h);
  for (Unit& unit : units_) {
    for (const std::shared_ptr<Work>& work : {unit.gather, unit.reduce}) {
      try {
        if (work) work->wait();  // MPI may still be writing into the buffers
      } catch (const Error&) {
        // Destroyed while unwinding from a failed collective: nothing to save.
      }
    }
  }
}

Tensor FullyShardedDataParallel::forward(const Tensor& input) { return module_->forward(input); }

Tensor FullyShardedDataParallel::forward_loss(const Tensor& input, const Tensor& targets) {
  return module_->forward_loss(input, targets);
}

// ---------------------------------------------------------------- gathering

void FullyShardedDataParallel::start_gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.resident || unit.gather) return;
  unit.storage->restore_memory();
  unit.version = unit.storage->version();
  const Tensor mine = layout_->unit_shard(master_, u);
  if (param_dtype_ == kF32) {
    unit.send = mine;
  } else {
    const MemoryCategoryScope parameters(MemoryCategory::Parameters);
    unit.send = empty({mine.numel()}, param_dtype_, device_);
    kernels::copy(mine, unit.send);
  }
  unit.gather = group_.all_gather(unit.gathered, unit.send);
  ++stats_.gathers;
}

void FullyShardedDataParallel::ensure_gathered(size_t u) {
  Unit& unit = units_[u];
  start_gather(u);
  if (unit.gather) {
    unit.gather->wait();
    unit.gather.reset();
    unit.send = Tensor();  // (a bf16/f16 copy of this rank's shard: 1/N of the unit, freed at once)
    unit.resident = true;
    // New values (after a step) get a new version, for what caches by
    // version; a regather within a step keeps the version the tensors saved
    // for backward hold (the collective's own copy may have bumped it).
    unit.storage->set_version(unit.changed ? unit.version + 1 : unit.version);
    unit.changed = false;
  }
  peak_gathered_ = std::max(peak_gathered_, gathered_units());
}

void FullyShardedDataParallel::prefetch(size_t u) {
  if (options_.prefetch && u < units_.size() && !units_[u].reduced) start_gather(u);
}

void FullyShardedDataParallel::free_unit(size_t u) {
  Unit& unit = units_[u];
  if (options_.strategy != ShardingStrategy::Full) return;
  if (unit.gather) {
    unit.gather->wait();
    unit.gather.reset();
    unit.send = Tensor();
  }
  unit.storage->release_memory();
  unit.resident = false;
}

int FullyShardedDataParallel::gathered_units() const {
  int n = 0;
  for (const Unit& unit : units_) n += unit.resident || unit.gather ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------- forward

void FullyShardedDataParallel::entering(const nn::Module& module) {
  if (summoned_) return;
  auto it = unit_of_module_.find(&module);
  if (it == unit_of_module_.end()) return;
  const size_t u = it->second;
  open_units_.emplace_back(u, autograd::next_sequence_nr());
  if (units_[u].resident || units_[u].gather) ++stats_.found_prefetched;
  ensure_gathered(u);
  if (u == root()) {
    prefetch(0);
  } else if (checkpoint_recomputing()) {
    if (u > 0) prefetch(u - 1);  // a recomputation runs in backward: the unit before is next
  } else {
    prefetch(u + 1 < root() ? u + 1 : units_.size());
  }
}

void FullyShardedDataParallel::leaving(const nn::Module& module) noexcept {
  if (summoned_ || open_units_.empty()) return;
  auto it = unit_of_module_.find(&module);
  if (it == unit_of_module_.end() || it->second != open_units_.back().first) return;
  const auto [u, first] = open_units_.back();
  open_units_.pop_back();
  try {
    const uint64_t end = autograd::next_sequence_nr();
    if (u != root() && end > first) ranges_.push_back({first, end, u});
    // Backward needs the root and regathers the others; a recomputation's
    // unit stays until its gradients are reduced.
    if (u == root() ? !GradMode::is_enabled() : !checkpoint_recomputing()) free_unit(u);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: FullyShardedDataParallel: after a forward of a unit: %s\n", e.what());
    std::abort();
  }
}

// ---------------------------------------------------------------- backward

void FullyShardedDataParallel::note_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  autograd::queue_callback([this] { finish_backward(); });
}

void FullyShardedDataParallel::before_node(const autograd::Node& node) {
  if (ranges_.empty() || summoned_) return;
  const uint64_t seq = node.sequence_nr();
  // Ranges are recorded in increasing order of their first node.
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), seq, [](uint64_t s, const Range& r) { return s < r.first; });
  if (it == ranges_.begin()) return;
  --it;
  if (seq >= it->end) return;
  const size_t u = it->unit;
  note_backward();
  // A unit whose gradients are all in (reduced) needs its parameters no more:
  // the nodes of its range still to run (casts of its inputs) do not read them.
  if (units_[u].reduced) return;
  if (!units_[u].resident || units_[u].gather) {
    if (units_[u].gather) ++stats_.found_prefetched;
    ensure_gathered(u);
    if (u > 0) prefetch(u - 1);
  }
}

void FullyShardedDataParallel::gradient_ready(size_t u) {
  note_backward();
  if (++units_[u].ready == units_[u].needs_grad) launch_ready_reductions();
}

void FullyShardedDataParallel::launch_ready_reductions() {
  while (next_reduce_ < reduce_order_.size()) {
    const Unit& unit = units_[reduce_order_[next_reduce_]];
    if (unit.ready < unit.needs_grad) return;
    launch_reduction(reduce_order_[next_reduce_++]);
  }
}

// Where backward writes a parameter's first gradient: its slice of the
// unit's reduce-scatter buffer when the dtypes agree (PyTorch DDP's
// gradient_as_bucket_view: no copy, and the full gradients and the buffer
// are one), else a tensor of its own.
Tensor FullyShardedDataParallel::reduce_buffer(size_t u) {
  Unit& unit = units_[u];
  if (!unit.reduce_in.defined()) {
    // Counting this one, at most two units' buffers besides the root's: the
    // oldest reduction in flight finishes first.
    while (u != root() && in_flight_.size() >= kReductionsInFlight) {
      finish_reduction(in_flight_.front());
      in_flight_.pop_front();
    }
    const MemoryCategoryScope gradients(MemoryCategory::Gradients);
    unit.reduce_in = empty({layout_->units()[u].shard * group_.size()}, options_.reduce_dtype, device_);
  }
  return unit.reduce_in;
}

Tensor FullyShardedDataParallel::grad_destination(size_t u, size_t param) {
  if (options_.reduce_dtype != param_dtype_) return Tensor();
  return reduce_buffer(u)
      .narrow(0, layout_->offset(param) - layout_->units()[u].begin, params_[param].numel())
      .view(params_[param].sizes());
}

// The unit's full gradients in its reduce_dtype buffer (zeros where a
// parameter got none), freed with the unit's parameters, and reduce-scattered.
void FullyShardedDataParallel::launch_reduction(size_t u) {
  NoGradGuard no_grad;
  Unit& unit = units_[u];
  const ShardLayout::Unit& lu = layout_->units()[u];
  const Tensor buffer = reduce_buffer(u);
  if (options_.reduce_dtype == kF32 && !grads_valid_) {
    unit.reduce_out = layout_->unit_shard(grads_, u);  // the first backward since zero_grad: straight in
  } else {
    const MemoryCategoryScope gradients(MemoryCategory::Gradients);
    unit.reduce_out = empty({lu.shard}, options_.reduce_dtype, device_);
  }
  int64_t used = 0;
  for (size_t i : unit.params) {
    const Tensor slot = buffer.narrow(0, layout_->offset(i) - lu.begin, params_[i].numel());
    used += params_[i].numel();
    const Tensor g = params_[i].grad();
    if (g.defined()) {
      if (g.storage() != buffer.storage()) kernels::copy(g, slot.view(params_[i].sizes()));
      scaled_ = scaled_ || g.impl()->loss_scaled;
      params_[i].impl()->grad.reset();
    } else {
      kernels::fill(slot, 0.0);  // another rank's batch may have reached it
    }
  }
  if (buffer.numel() > used) kernels::fill(buffer.narrow(0, used, buffer.numel() - used), 0.0);
  if (u != root()) free_unit(u);
  unit.reduced = true;
  unit.reduce = group_.reduce_scatter(unit.reduce_out, unit.reduce_in);
  ++stats_.reduce_scatters;
  in_flight_.push_back(u);  // reduce_buffer keeps at most two in flight
}

// A reduction's mean into this rank's f32 shard gradients (added to the last
// backward's until zero_grad), its buffers freed.
void FullyShardedDataParallel::finish_reduction(size_t u) {
  Unit& unit = units_[u];
  unit.reduce->wait();
  unit.reduce.reset();
  detail::divide_in_place({unit.reduce_out}, group_.size());  // the sum becomes the mean
  const Tensor mine = layout_->unit_shard(grads_, u);
  const bool reduced_into_shard = unit.reduce_out.storage() == grads_.storage();
  if (!reduced_into_shard && grads_valid_) {
    Tensor mean = unit.reduce_out;
    if (mean.dtype() != kF32) mean = mean.to(kF32);
    kernels::binary(kernels::BinaryOp::Add, mine, mean, mine);
  } else if (!reduced_into_shard) {
    kernels::copy(unit.reduce_out, mine);
  }
  unit.reduce_in = Tensor();
  unit.reduce_out = Tensor();
}

// When backward ends: the rest of the reductions, and the shard gradients
// handed to the optimizer's parameters.
void FullyShardedDataParallel::finish_backward() {
  NoGradGuard no_grad;
  while (next_reduce_ < reduce_order_.size()) launch_reduction(reduce_order_[next_reduce_++]);
  while (!in_flight_.empty()) {
    finish_reduction(in_flight_.front());
    in_flight_.pop_front();
  }
  for (Unit& unit : units_) {
    unit.ready = 0;
    unit.reduced = false;
  }
  free_unit(root());
  const std::vector<ShardLayout::Part>& parts = layout_->parts();
  for (size_t k = 0; k < parts.size(); ++k) {
    Tensor grad = layout_->part_of(grads_, parts[k]);
    grad.impl()->loss_scaled = scaled_;
    part_views_[k].impl()->grad = grad.impl_ptr();
  }
  grads_valid_ = true;
  scaled_ = false;
  ranges_.clear();
  next_reduce_ = 0;
  in_backward_ = false;
}

// ---------------------------------------------------------------- the step

Tensor FullyShardedDataParallel::clip_grad_norm_(double max_norm) {
  return clip_sharded_grad_norm_(*shard_, max_norm, group_, device_, "FullyShardedDataParallel");
}

void FullyShardedDataParallel::step_done() {
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].changed = true;
    if (options_.strategy == ShardingStrategy::Full) {
      free_unit(u);
    } else {
      units_[u].resident = false;  // gathered again, below
    }
  }
  if (options_.strategy == ShardingStrategy::GradsAndState) {
    for (size_t u = 0; u < units_.size(); ++u) start_gather(u);
    for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
  }
}

void FullyShardedDataParallel::zero_grad() {
  shard_->zero_grad();
  for (const Tensor& p : params_) p.impl()->grad.reset();
  grads_valid_ = false;
}

// ---------------------------------------------------------------- whole parameters and state

FullyShardedDataParallel::FullParameters::FullParameters(FullyShardedDataParallel& fsdp, bool write_back)
    : fsdp_(fsdp), write_back_(write_back) {
  NoGradGuard no_grad;
  const ShardLayout& layout = *fsdp.layout_;
  Tensor flat = empty({layout.flat_elements()}, kF32, fsdp.device_);
  for (size_t u = 0; u < fsdp.units_.size(); ++u) {
    fsdp.group_.all_gather(layout.unit_flat(flat, u), layout.unit_shard(fsdp.master_, u))->wait();
  }
  for (size_t i = 0; i < fsdp.params_.size(); ++i) {
    TensorImpl& impl = *fsdp.params_[i].impl();
    saved_.push_back({impl.storage, impl.offset, impl.dtype});
    const Tensor whole = layout.flat_slice(flat, i).to(layout.dtype(i)).contiguous().clone();
    impl.storage = whole.impl()->storage;
    impl.offset = whole.impl()->offset;
    impl.dtype = layout.dtype(i);
  }
  fsdp.summoned_ = true;
}

FullyShardedDataParallel::FullParameters::~FullParameters() {
  NoGradGuard no_grad;
  const ShardLayout& layout = *fsdp_.layout_;
  if (write_back_) {
    for (const ShardLayout::Part& part : layout.parts()) {
      kernels::copy(fsdp_.params_[part.param].view({-1}).narrow(0, part.begin, part.length),
                    layout.part_of(fsdp_.master_, part));
    }
  }
  for (size_t i = 0; i < fsdp_.params_.size(); ++i) {
    TensorImpl& impl = *fsdp_.params_[i].impl();
    impl.storage = saved_[i].storage;
    impl.offset = saved_[i].offset;
    impl.dtype = saved_[i].dtype;
  }
  fsdp_.summoned_ = false;
  if (write_back_) {
    try {
      fsdp_.step_done();  // the shards changed: what is gathered is out of date
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: FullyShardedDataParallel: gathering the written-back parameters: %s\n", e.what());
      std::abort();
    }
  }
}

void FullyShardedDataParallel::load_master_shard(const Tensor& values) {
  MT_CHECK(values.dtype() == kF32 && values.sizes() == master_.sizes(),
           "FullyShardedDataParallel: a master shard of {} {} does not fit this rank's {} f32 elements",
           values.shape_string(), values.dtype(), master_.numel());
  NoGradGuard no_grad;
  kernels::copy(values.to(device_), master_);
  step_done();  // what is gathered is out of date
}

optim::StateDict FullyShardedDataParallel::consolidated_state_dict() {
  const Tensor scratch = empty({layout_->flat_elements()}, kF32, device_);
  return consolidate_optimizer_state(*layout_, *shard_, group_, scratch);
}

void FullyShardedDataParallel::load_consolidated_state_dict(const optim::StateDict& state) {
  load_consolidated_optimizer_state(*layout_, *shard_, state, "FullyShardedDataParallel");
}

std::vector<std::vector<std::string>> FullyShardedDataParallel::unit_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Unit& unit : units_) {
    out.emplace_back();
    for (size_t i : unit.params) out.back().push_back(names_[i]);
  }
  return out;
}

std::vector<int64_t> FullyShardedDataParallel::unit_shard_elements() const {
  std::vector<int64_t> out;
  for (const ShardLayout::Unit& unit : layout_->units()) out.push_back(unit.shard);
  return out;
}

void FullyShardedDataParallel::keep_f32_state(const Tensor& param) {
  dist::keep_f32_state(*layout_, *shard_, part_views_, params_, param, "FullyShardedDataParallel");
}

}  // namespace mt::dist
