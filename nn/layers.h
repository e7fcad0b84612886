// Layers. Each holds its parameters as public Tensors with PyTorch's names
// (weight, bias, running_mean, ...) so state_dicts line up with PyTorch's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/ops.h"
#include "nn/module.h"

namespace mt::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // With the activation fused into the GEMM's epilogue (one kernel, one rounding).
  Tensor forward(const Tensor& x, LinearActivation activation);
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "LayerNorm"; }
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  Tensor weight;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  std::string name() const override { return "Dropout"; }

 private:
  double p_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::None) : approximation_(approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximation_); }
  std::string name() const override { return "GELU"; }

 private:
  GeluApproximation approximation_;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string name() const override { return "SiLU"; }
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  Tensor weight, bias;

 private:
  Size2 stride_, padding_, dilation_;
  int64_t groups_;
};

// Batch statistics in training (computed in f32 always, as AMP's "BN in
// FP32" rule says, with f32 parameters and running statistics; f16/bf16
// activations stay in their dtype), running statistics in eval;
// num_batches_tracked as in PyTorch.
//
// Running statistics that survive a skipped step. Under f16, a batch whose
// forward overflows puts inf/NaN into its batch statistics; the GradScaler
// then skips the step, but an immediate update has already written them into
// running_mean / running_var, for good (PyTorch's issues #90342, #88474).
// stage_statistics() makes training forwards update staging copies instead,
// and commit_statistics_unless(found_inf) moves them into the running
// buffers (and counts num_batches_tracked) only when found_inf is 0. The
// kernel reads the flag on the device: no host read, nothing for a CUDA graph
// to trip on. Micro-batches of one step (gradient accumulation) stage on top
// of each other, so a committed step equals the immediate update bit for bit.
// Off by default: without it every training forward updates the running
// statistics at once, as PyTorch does. For a whole model, see
// stage_batch_norm_statistics below.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "BatchNorm2d"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

  // Turning staging off drops an update not yet committed.
  void stage_statistics(bool on = true);
  bool stages_statistics() const { return staging_; }
  // Commits what the training forwards since the last commit staged, unless
  // found_inf (f32, one element: GradScaler's StepOutcome::found_inf()) is
  // non-zero; an undefined found_inf (a disabled scaler) commits. Either way
  // the staged update is then spent. Nothing staged: nothing happens.
  void commit_statistics_unless(const Tensor& found_inf);

  // Synchronised batch norm (PyTorch's SyncBatchNorm): in training, the
  // batch statistics are every rank's (sync_batch_norm in autograd/ops.h),
  // all_reduce_sum summing a tensor over the ranks in place. An empty
  // function turns it off. dist::convert_sync_batchnorm sets it on a model.
  void sync_statistics(AllReduceSum all_reduce_sum) { all_reduce_sum_ = std::move(all_reduce_sum); }
  bool syncs_statistics() const { return all_reduce_sum_ != nullptr; }

 private:
  // The staging copies for this step's first training forward: the running statistics as they are.
  void start_staged_update();
  // batch_norm, or in training with sync_statistics the ranks' sync_batch_norm.
  Tensor normalise(const Tensor& x, const Tensor& running_mean_or_staged, const Tensor& running_var_or_staged);
  AllReduceSum all_reduce_sum_;

  double eps_, momentum_;
  bool staging_ = false;
  int64_t staged_batches_ = 0;  // training forwards staged since the last commit
  Tensor staged_mean_, staged_var_;
};

// Every BatchNorm2d in `model` (itself included), for a training loop with a
// GradScaler:
//
//   nn::stage_batch_norm_statistics(model);                  // once
//   for (...) {                                              // each step
//     scaler.scale(loss_fn(model.forward(x))).backward();   // forwards stage
//     const amp::StepOutcome outcome = scaler.step(opt);    // skipped on the device on inf
//     nn::commit_batch_norm_statistics_unless(model, outcome.found_inf());
//     scaler.update();
//   }
//
// With several optimizers, pass the flag of the one whose skip should also
// drop the statistics (or their sum). `mixtape train` does this under
// --precision fp16 (tools/train/step.cpp).
void stage_batch_norm_statistics(Module& model, bool on = true);
void commit_batch_norm_statistics_unless(Module& model, const Tensor& found_inf);

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override { return "MaxPool2d"; }

 private:
  Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override { return "AvgPool2d"; }

 private:
  Size2 kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_); }
  std::string name() const override { return "AdaptiveAvgPool2d"; }

 private:
  Size2 output_;
};

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
  std::string name() const override { return "Sequential"; }
};

// Holds modules without a forward of its own (named "0", "1", ...).
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor&) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
  std::string name() const override { return "ModuleList"; }
};

}  // namespace mt::nn
