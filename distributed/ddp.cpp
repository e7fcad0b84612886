#include "distributed/ddp.h"

#include <chrono>

#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "distributed/backends.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::dist {
Device parameters_device(const nn::Module& module, const char* who) {
  const std::vector<Tensor> params = module.parameters();
  MT_CHECK(!params.empty(), "{}: the module has no parameters", who);
  return params.front().device();
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options,
                                                 ProcessGroup* group)
    : module_(std::move(module)),
      options_(options),
      group_(group != nullptr ? *group : group_for(parameters_device(*module_, "DistributedDataParallel"))) {
  MT_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
           "DistributedDataParallel: bucket sizes must be positive");
  MT_CHECK(options.reduce_dtype == kF32 || options.reduce_dtype == kF16 || options.reduce_dtype == kBF16,
           "DistributedDataParallel: buckets must be f32, f16 or bf16, not {}", options.reduce_dtype);
  register_module("module", module_);
  start_from_rank0(*module_, group_, "DistributedDataParallel");
  build_buckets();
  for (size_t i = 0; i < slots_.size(); ++i) {
    hooks_.push_back(
        autograd::register_post_accumulate_grad_hook(slots_[i].param, [this, i](const Tensor&) { gradient_ready(i); }));
    if (slots_[i].view) {
      hooks_.push_back(autograd::register_grad_destination(
          slots_[i].param, [this, i](const Tensor&) { return bucket_segment(slots_[i]); }));
    }
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (uint64_t h : hooks_) autograd::remove_hook(h);
  for (Bucket& b : buckets_) {
    try {
      if (b.work) b.work->wait();  // MPI may still be writing into the bucket
    } catch (const Error&) {
      // Destroyed while unwinding from a failed collective: nothing to save.
    }
  }
}

// Ranks that built different models would exchange garbage (or hang in a
// broadcast of a different size): one small all-gather settles it first.
void start_from_rank0(nn::Module& module, ProcessGroup& group, const char* who) {
  const auto named = module.named_parameters();
  MT_CHECK(!named.empty(), "{}: the module has no parameters", who);
  int64_t elements = 0;
  for (const auto& [name, p] : named) elements += p.numel();
  Tensor mine = from_vector(std::vector<int64_t>{static_cast<int64_t>(named.size()), elements}, {2}, kI64);
  const Device device = named.front().second.device();
  if (!device.host_accessible()) mine = mine.to(device);
  Tensor all = empty({2 * group.size()}, kI64, mine.device());
  group.all_gather(all, mine)->wait();
  const std::vector<double> counts = all.to(kCPU).to_vector();
  for (int r = 0; r < group.size(); ++r) {
    MT_CHECK(counts[2 * r] == counts[0] && counts[2 * r + 1] == counts[1],
             "{}: rank {} has {} parameters ({} elements) but rank 0 has {} ({}): every rank must build the same "
             "model",
             who, r, counts[2 * r], counts[2 * r + 1], counts[0], counts[1]);
  }
  std::vector<Tensor> state;
  for (auto& [name, p] : named) state.push_back(p);
  for (auto& [name, b] : module.named_buffers()) state.push_back(b);
  broadcast_from_rank0(state, group, who);
}

void broadcast_from_rank0(const std::vector<Tensor>& tensors, ProcessGroup& group, const char* who) {
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : tensors) {
    MT_CHECK(t.is_contiguous(), "{}: parameters and buffers must be contiguous", who);
    works.push_back(group.broadcast(t, 0));
  }
  for (auto& w : works) w->wait();
  for (const Tensor& t : tensors) t.storage()->bump_version();
}

void DistributedDataParallel::build_buckets() {
  const auto named = module_->named_parameters();
  const int64_t element_bytes = static_cast<int64_t>(element_size(options_.reduce_dtype));
  std::vector<std::vector<size_t>> layout;
  int64_t filled = 0;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    if (!it->second.requires_grad()) continue;
    const int64_t cap = layout.size() == 1 ? options_.first_bucket_bytes : options_.bucket_bytes;
    const int64_t bytes = it->second.numel() * element_bytes;
    if (layout.empty() || (filled > 0 && filled + bytes > cap)) {
      layout.emplace_back();
      filled = 0;
    }
    layout.back().push_back(slots_.size());
    filled += bytes;
    slots_.push_back({.name = it->first, .param = it->second});
  }
  const Device device = slots_.empty() ? kCPU : slots_.front().param.device();
  for (size_t b = 0; b < layout.size(); ++b) {
    Bucket bucket;
    int64_t offset = 0;
    for (size_t s : layout[b]) {
      slots_[s].bucket = b;
      slots_[s].offset = offset;
      offset += slots_[s].param.numel();
    }
    for (size_t s : layout[b]) {
      const Tensor& p = slots_[s].param;
      slots_[s].view = options_.gradient_as_bucket_view && p.dtype() == options_.reduce_dtype && p.device() == device;
    }
    const MemoryCategoryScope gradients(MemoryCategory::Gradients);
    bucket.flat = empty({offset}, options_.reduce_dtype, device);
    bucket.slots = layout[b];
    bucket.pending = layout[b].size();
    buckets_.push_back(std::move(bucket));
  }
}

// The slot's slice of its bucket, shaped as the parameter.
Tensor DistributedDataParallel::bucket_segment(const Slot& slot) const {
  return buckets_[slot.bucket].flat.narrow(0, slot.offset, slot.param.numel()).view(slot.param.sizes());
}

bool DistributedDataParallel::grad_is_bucket_segment(const Slot& slot) const {
  const Tensor grad = slot.param.grad();
  const Tensor& flat = buckets_[slot.bucket].flat;
  return grad.defined() && grad.storage() == flat.storage() &&
         grad.data_ptr() == static_cast<const char*>(flat.data_ptr()) + slot.offset * element_size(flat.dtype());
}

// gradient_as_bucket_view: a .grad made elsewhere (assigned by the user, or
// accumulated before DDP existed) is replaced by the bucket's slice once
// its values are there.
void DistributedDataParallel::point_grad_at_bucket(Slot& slot, bool loss_scaled) {
  Tensor segment = bucket_segment(slot);
  segment.impl()->loss_scaled = loss_scaled;
  slot.param.impl()->grad = segment.impl_ptr();
}

void DistributedDataParallel::broadcast_buffers() {
  if (group_.size() == 1) return;
  std::vector<Tensor> buffers;
  for (auto& [name, b] : module_->named_buffers()) buffers.push_back(b);
  if (!buffers.empty()) broadcast_from_rank0(buffers, group_, "DistributedDataParallel");
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && is_training()) broadcast_buffers();
  return module_->forward(input);
}

Tensor DistributedDataParallel::forward_loss(const Tensor& input, const Tensor& targets) {
  if (options_.broadcast_buffers && is_training()) broadcast_buffers();
  return module_->forward_loss(input, targets);
}

void DistributedDataParallel::gradient_ready(size_t index) {
  if (!sync_) return;
  Slot& slot = slots_[index];
  if (!in_backward_) {
    in_backward_ = true;
    autograd::queue_callback([this] { finish_backward(); });
  }
  MT_CHECK(!slot.ready,
           "DistributedDataParallel: the gradient of '{}' became ready twice in one backward (is the parameter used "
           "both inside and outside a checkpointed segment?)",
           slot.name);
  slot.ready = true;
  if (!grad_is_bucket_segment(slot)) {
    const Tensor grad = slot.param.grad();
    kernels::copy(grad, bucket_segment(slot));
    if (slot.view) point_grad_at_bucket(slot, grad.impl()->loss_scaled);
  }
  --buckets_[slot.bucket].pending;
  launch_ready_buckets();
}

// Buckets start in index order, the same on every rank (MPI and NCCL
// require the same collectives in the same order everywhere).
void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = group_.all_reduce(b.flat, ReduceOp::Sum);
    ++buckets_reduced_;
  }
}

void DistributedDataParallel::finish_backward() {
  in_backward_ = false;
  const bool scaled = autograd::in_loss_scaled_backward();
  // A parameter this backward did not reach contributes what its .grad
  // holds from micro-batches under no_sync(), or zeros (another rank's
  // batch may have reached it).
  for (Bucket& b : buckets_) {
    if (b.pending == 0) continue;
    for (size_t s : b.slots) {
      Slot& slot = slots_[s];
      if (slot.ready || grad_is_bucket_segment(slot)) continue;
      if (slot.param.grad().defined()) {
        kernels::copy(slot.param.grad(), bucket_segment(slot));
      } else {
        kernels::fill(bucket_segment(slot), 0.0);
      }
    }
    b.pending = 0;
  }
  last_comm_ = {.buckets = static_cast<int>(buckets_.size())};
  for (size_t i = 0; i < next_launch_; ++i) {  // started by the hooks, during backward
    ++last_comm_.started_during_backward;
    if (!buckets_[i].work->is_completed()) continue;
    ++last_comm_.finished_during_backward;
    last_comm_.bytes_finished_during_backward += static_cast<int64_t>(buckets_[i].flat.nbytes());
  }
  launch_ready_buckets();
  const auto waiting = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
  last_comm_.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count();
  NoGradGuard no_grad;
  std::vector<Tensor> sums;
  for (const Bucket& b : buckets_) sums.push_back(b.flat);
  detail::divide_in_place(sums, group_.size());  // the sums become means
  for (Bucket& b : buckets_) {
    for (size_t s : b.slots) {
      Slot& slot = slots_[s];
      slot.ready = false;
      if (grad_is_bucket_segment(slot)) continue;  // already the mean
      TensorImpl& param = *slot.param.impl();
      if (slot.view) {
        point_grad_at_bucket(slot, param.grad ? param.grad->loss_scaled || scaled : scaled);
        continue;
      }
      if (!param.grad) {
        Tensor zeros_like = empty(param.sizes, param.dtype, param.device);
        tag_memory(zeros_like, MemoryCategory::Gradients);
        param.grad = zeros_like.impl_ptr();
        param.grad->loss_scaled = scaled;
      }
      kernels::copy(bucket_segment(slot), Tensor(param.grad));
    }
    b.pending = b.slots.size();
  }
  next_launch_ = 0;
}

std::vector<int64_t> DistributedDataParallel::bucket_sizes() const {
  std::vector<int64_t> out;
  for (const Bucket& b : buckets_) out.push_back(static_cast<int64_t>(b.flat.nbytes()));
  return out;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t s : b.slots) out.back().push_back(slots_[s].name);
  }
  return out;
}

}  // namespace mt::dist
