// DistributedDataParallel: data parallel training of one Module, one process
// per device, gradients averaged over the ranks during backward.
//
//   auto model = std::make_shared<MyNet>();
//   mt::dist::DistributedDataParallel ddp(model);   // rank 0's weights everywhere
//   for (batch : this rank's shard) {               // DataLoader shard_rank/shard_count
//     scaler.scale(loss_fn(ddp.forward(x), y)).backward();  // returns with averaged gradients
//     scaler.step(opt); scaler.update(); opt.zero_grad();
//   }
//
// How (as PyTorch's DDP): at construction every parameter and buffer is
// broadcast from rank 0, and the parameters are laid out, in reverse
// registration order (about the order backward produces their gradients),
// into buckets: the first of first_bucket_bytes, the rest of bucket_bytes.
// A post-accumulate-grad hook (autograd/hooks.h) copies each gradient into
// its bucket as soon as backward has finished it; a full bucket is
// all-reduced at once, on the communication thread (MPI) or stream (NCCL),
// while backward goes on. Buckets start in index order on every rank. When
// backward ends, the engine runs DDP's callback: it starts what is left
// (a parameter no gradient reached counts as zeros), waits, divides by the
// world size and writes the averages back into each .grad.
//
// Mixed precision: buckets are f32 by default whatever the parameters' dtype,
// so f16 gradients scaled by a GradScaler are summed without overflowing.
// Every rank then holds the same (scaled) gradients, so unscale_ finds the
// same inf/NaN on every rank and they all skip the step together.
//
// gradient_as_bucket_view (as PyTorch's option of that name): each .grad
// whose dtype is the bucket's is a view of its slice of the bucket, and
// backward writes it there directly (autograd::register_grad_destination).
// That saves both copies and one gradient's worth of memory; the gradients
// then are the bucket, so keep them only until the next backward.
//
// no_sync(): inside it backward only accumulates locally (the first K-1
// micro-batches of a gradient accumulation); the next backward outside it
// reduces the accumulated gradients once.
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace mt::dist {

struct DdpOptions {
  int64_t bucket_bytes = 25ll << 20;
  int64_t first_bucket_bytes = 1ll << 20;
  DType reduce_dtype = kF32;             // the buckets' dtype: f32, or f16/bf16 to halve the traffic
  bool broadcast_buffers = true;         // rank 0's buffers (norm statistics) before each training forward
  bool gradient_as_bucket_view = false;  // .grad as views of the buckets (where the dtypes agree)
};

// The device of the module's parameters (an mt::Error naming `who` when it has none).
Device parameters_device(const nn::Module& module, const char* who);

// What a data-parallel wrapper (DDP, FSDP) does first: refuse, on every
// rank, ranks that built different models (an mt::Error naming both, where
// a broadcast of different sizes would hang), then give every rank rank 0's
// parameters and buffers. `who` names the caller in errors.
void start_from_rank0(nn::Module& module, ProcessGroup& group, const char* who);
// `tensors` (contiguous) on every rank become rank 0's.
void broadcast_from_rank0(const std::vector<Tensor>& tensors, ProcessGroup& group, const char* who);

class DistributedDataParallel final : public nn::Module {
 public:
  // `group`: null means group_for(the parameters' device).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options = {},
                                   ProcessGroup* group = nullptr);
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  Tensor forward_loss(const Tensor& input, const Tensor& targets) override;
  nn::Module& module() { return *module_; }
  std::string name() const override { return "DistributedDataParallel"; }

  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }
  bool synchronizing() const { return sync_; }

  ProcessGroup& group() { return group_; }
  // Rank 0's buffers (norm statistics) on every rank; forward does it in
  // training (DdpOptions::broadcast_buffers), and before evaluating call it.
  void broadcast_buffers();
  // The buckets' sizes in bytes, in launch order, and each one's parameters.
  std::vector<int64_t> bucket_sizes() const;
  std::vector<std::vector<std::string>> bucket_parameters() const;
  // What the last synchronised backward's communication did: how many of
  // its buckets started while backward still ran (as their last gradient
  // arrived) and how many of those (and their bytes) had finished by the
  // time backward's own work ended: the communication overlap took off
  // backward's path; then how long it waited for the rest.
  struct BackwardComm {
    int buckets = 0;
    int started_during_backward = 0;
    int finished_during_backward = 0;
    int64_t bytes_finished_during_backward = 0;
    double wait_seconds = 0;
  };
  const BackwardComm& last_backward_comm() const { return last_comm_; }
  // All-reduces started since construction (one per bucket per synchronised backward).
  int64_t buckets_reduced() const { return buckets_reduced_; }

 private:
  struct Slot {
    std::string name;
    Tensor param;
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket, in elements
    bool ready = false;
    bool view = false;  // its .grad lives in the bucket (gradient_as_bucket_view)
  };
  struct Bucket {
    Tensor flat;  // reduce_dtype, on the parameters' device
    std::vector<size_t> slots;
    size_t pending = 0;
    std::shared_ptr<Work> work;
  };

  void build_buckets();
  Tensor bucket_segment(const Slot& slot) const;
  bool grad_is_bucket_segment(const Slot& slot) const;
  void point_grad_at_bucket(Slot& slot, bool loss_scaled);
  void gradient_ready(size_t slot);
  void launch_ready_buckets();
  void finish_backward();

  std::shared_ptr<nn::Module> module_;
  DdpOptions options_;
  ProcessGroup& group_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> hooks_;
  size_t next_launch_ = 0;
  bool in_backward_ = false;
  bool sync_ = true;
  BackwardComm last_comm_;
  int64_t buckets_reduced_ = 0;
};

}  // namespace mt::dist
