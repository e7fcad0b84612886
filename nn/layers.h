// Layers. Each holds its parameters as public Tensors with PyTorch's names
// (weight, bias, running_mean, ...) so state_dicts line up with PyTorch's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/int8.h"
#include "autograd/ops.h"
#include "nn/module.h"

namespace mt::nn {

// What Linear and Conv2d share: a weight [out, ...] and a bias with
// PyTorch's names, and an INT8 form for inference (post-training static
// quantization, W8A8; amp/int8_quantize.h calibrates and calls these).
// to_int8 replaces the float weight by `weight` (i8, a scale per output
// channel) and registers the buffers weight_scale (f32 [out]),
// weight_zero_point (i32 [out], zeros: symmetric), input_scale (f32 []) and
// input_zero_point (i32 []): each input is quantized to u8 with those
// before the INT8 GEMM (mt::int8::linear / conv2d), the bias stays float.
// The state dict then holds exactly these, so an INT8 checkpoint is the
// layer's state. While an input hook is set the layer hands it each input
// at the start of its forward: what calibration observes (PyTorch attaches
// its observers the same way).
class QuantizableLayer : public Module {
 public:
  Tensor weight, bias;

  using InputHook = std::function<void(const Tensor&)>;
  void set_input_hook(InputHook hook) { input_hook_ = std::move(hook); }

  void to_int8(const int8::Int8Tensor& weight, double input_scale, int32_t input_zero_point);
  // Why this layer has no INT8 form ("" when it has one).
  virtual std::string int8_unsupported_reason() const { return ""; }
  // SmoothQuant (Xiao et al. 2023), for a Linear before to_int8:
  // weight[:, j] *= s[j] and each input is divided by s[j] (buffer
  // input_smooth, f32 [in]), so the layer computes the same function while
  // the input's outlier channels shrink and the weight's columns grow to
  // meet them. Once INT8 the division rides in the input's quantize
  // (int8::InputQuantization).
  void smooth(const Tensor& s);
  // The same slots, zero-filled, for load_state_dict to fill from an INT8
  // checkpoint (with input_smooth when `smoothed`); check_int8() then
  // refuses scales, zero points or smoothing factors that do not fit (not
  // finite and positive, out of range, the wrong count).
  void make_int8_slots(bool smoothed = false);
  void check_int8() const;
  // An INT8 layer whose output feeds another INT8 layer through ReLU /
  // max-pool / flatten (nn::Module::int8_handoffs) hands it u8 activations
  // requantized with that layer's input scale and zero point (on the CPU;
  // elsewhere its output stays float and the next layer quantizes it).
  void requantize_output(const int8::Requantization& r);
  const std::optional<int8::Requantization>& output_requantization() const { return requantize_; }
  bool is_int8() const { return weight.defined() && weight.dtype() == kI8; }
  bool keeps_f32_buffers() const override { return is_int8() || input_smooth.defined(); }
  Tensor weight_scale, weight_zero_point, input_scale, input_zero_point, input_smooth;

 protected:
  int8::Int8Tensor int8_weight() const;
  int8::InputQuantization int8_input() const;
  // requantize_ where the kernels take it (an input on the CPU).
  std::optional<int8::Requantization> requantization_for(const Tensor& x) const {
    return x.device() == kCPU ? requantize_ : std::nullopt;
  }
  void report_input(const Tensor& input) const {
    if (input_hook_) input_hook_(input);
  }

 private:
  InputHook input_hook_;
  std::optional<int8::Requantization> requantize_;
  // input_zero_point's value as check_int8() read it, and its storage and
  // version then: int8_input() hands it to the INT8 kernels while the
  // buffer is unchanged, so a forward reads nothing back from a device.
  mutable int32_t checked_zero_point_ = 0;
  mutable std::weak_ptr<Storage> checked_zero_point_storage_;
  mutable uint64_t checked_zero_point_version_ = 0;
};

class Linear : public QuantizableLayer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // With the activation fused into the GEMM's epilogue (one kernel, one rounding).
  Tensor forward(const Tensor& x, LinearActivation activation);
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};

// Root-mean-square normalisation (Zhang and Sennrich; PyTorch's nn.RMSNorm), the op rms_norm:
// y = x / sqrt(mean(x^2 over normalized_shape) + eps) * weight. eps defaults,
// as PyTorch's, to the machine epsilon of x's dtype. The statistic is
// computed in f32 (f64 for f64) from f16/bf16 inputs, as norms are under
// AMP; the result has the promoted dtype of x and weight (bf16 for a bf16
// model, f32 for bf16 activations with f32 weights under autocast, like
// layer_norm's).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  bool is_norm_layer() const override { return true; }
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Tensor weight;

 private:
  Shape normalized_shape_;
  std::optional<double> eps_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor weight;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training()); }
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

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

class BatchNorm2d;

class Conv2d : public QuantizableLayer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // Folds `bn`, in eval mode (its running statistics), into this
  // convolution, as PyTorch's fuse_conv_bn_eval: per output channel o,
  // s = gamma[o] / sqrt(running_var[o] + eps), W[o] *= s, and
  // b[o] = (b[o] - running_mean[o]) s + beta[o] (computed in f64, stored in
  // the weight's dtype), a bias-free convolution gaining a bias; then
  // bn.mark_folded(). The pair then computes what conv -> bn computed in
  // eval (to rounding) with one pass over the activations less, and an INT8
  // convolution quantizes the folded weights (per output channel, so s
  // costs no precision). Only where this convolution's output feeds `bn`
  // alone (Module::conv_batch_norm_pairs).
  void fold_batch_norm(BatchNorm2d& bn);
  // A zero bias for a folded checkpoint's to fill (a bias-free convolution
  // gains one when folded); nothing when it has one.
  void make_bias_slot();
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  std::string int8_unsupported_reason() const override {
    return groups_ == 1 ? "" : "a grouped convolution: the INT8 convolution takes groups = 1";
  }

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
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

  // Turning staging off drops an update not yet committed.
  void stage_statistics(bool on = true);
  bool stages_statistics() const { return staging_; }
  // Commits what the training forwards since the last commit staged, unless
  // found_inf (f32, one element: GradScaler's StepOutcome::found_inf()) is
  // non-zero; an undefined found_inf (a disabled scaler) commits. Either way
  // the staged update is then spent. Nothing staged: nothing happens.
  void commit_statistics_unless(const Tensor& found_inf);

  // Set by Conv2d::fold_batch_norm (or by loading a checkpoint that lists
  // this layer as folded): forward returns its input, the convolution before
  // it applies the normalisation. Eval only: a folded batch norm refuses to
  // train. Not part of the state dict (its tensors stay as they were); an
  // INT8 checkpoint names its folded batch norms in its metadata.
  void mark_folded() { folded_ = true; }
  double eps() const { return eps_; }
  bool is_folded() const { return folded_; }

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
  bool folded_ = false;
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

// Multi-head attention with PyTorch's nn.MultiheadAttention constructor,
// parameters (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight,
// out_proj.bias: a PyTorch state_dict loads as it is) and call:
//
//   nn::MultiheadAttention attn(512, 8, /*dropout=*/0.1, /*bias=*/true, /*batch_first=*/true);
//   Tensor y = attn.forward(x, x, x, key_padding_mask, Tensor(), /*is_causal=*/true);
//
// query [L, N, E] (or [N, L, E] with batch_first), key/value [S, N, E];
// key_padding_mask bool [N, S], true = a padding key nobody attends to;
// attn_mask [L, S] or [N * num_heads, L, S], bool (true = NOT allowed, as
// PyTorch's module; note sdpa's bool mask is the opposite) or floating
// (added to the scores); is_causal masks keys after each query. It runs
// scaled_dot_product_attention (the fused kernels where they apply) and
// returns the output only, as PyTorch's need_weights=False: the fused
// kernels never form the attention weights. Dropout on the weights in
// training mode only.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = Tensor(),
                 const Tensor& attn_mask = Tensor(), bool is_causal = false);
  // Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
  bool batch_first_;
};

// A list of modules named "0", "1", ... as in PyTorch: iterate over it
// (for (auto& block : *blocks)), index it, or take a typed element
// (blocks->at<Block>(i)); Sequential and ModuleList are both one.
class ModuleSequence : public Module {
 public:
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // Element i as a T; an mt::Error naming what it is when it is not one.
  template <typename T>
  std::shared_ptr<T> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<T>((*this)[i]);
    MT_CHECK(typed != nullptr, "{}::at<T>({}): the module there is a {}, not the type asked for", name(), i,
             (*this)[i]->name());
    return typed;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Runs its children in order.
class Sequential : public ModuleSequence {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
};

// Holds modules without a forward of its own.
class ModuleList : public ModuleSequence {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  std::string name() const override { return "ModuleList"; }
};

}  // namespace mt::nn
