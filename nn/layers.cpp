#include "nn/layers.h"

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "kernels/batch_norm/batch_norm.h"
#include "nn/init.h"

namespace mt::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  MT_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got {} -> {}", in_features,
           out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  init::default_weight_(weight, in_features);
  if (with_bias) {
    register_parameter("bias", bias, empty({out_features}));
    init::default_bias_(bias, in_features);
  }
}

Tensor Linear::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  return linear(x, weight, bias);
}
Tensor Linear::forward(const Tensor& x, LinearActivation activation) {
  const ForwardScope scope(*this);
  return linear(x, weight, bias, activation);
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    register_parameter("weight", weight, ones(normalized_shape_));
    register_parameter("bias", bias, zeros(normalized_shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  return layer_norm(x, normalized_shape_, weight, bias, eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  const ForwardScope scope(*this);
  return embedding(weight, indices);
}

Dropout::Dropout(double p) : p_(p) { MT_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got {}", p); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
               int64_t groups, bool with_bias)
    : stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {
  MT_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
           "Conv2d: groups {} must divide in_channels {} and out_channels {}", groups, in_channels, out_channels);
  const int64_t fan_in = in_channels / groups * kernel.h * kernel.w;
  register_parameter("weight", weight, empty({out_channels, in_channels / groups, kernel.h, kernel.w}));
  init::default_weight_(weight, fan_in);
  if (with_bias) {
    register_parameter("bias", bias, empty({out_channels}));
    init::default_bias_(bias, fan_in);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_);
}

BatchNorm2d::BatchNorm2d(int64_t channels, double eps, double momentum) : eps_(eps), momentum_(momentum) {
  register_parameter("weight", weight, ones({channels}));
  register_parameter("bias", bias, zeros({channels}));
  register_buffer("running_mean", running_mean, zeros({channels}));
  register_buffer("running_var", running_var, ones({channels}));
  register_buffer("num_batches_tracked", num_batches_tracked, zeros({}, kI64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  MT_CHECK(x.dim() == 4, "BatchNorm2d: expected [N, C, H, W] input, got {}", x.shape_string());
  // A checkpointed stage reruns this forward in backward: the running
  // statistics were updated by the first run and must not move again.
  const bool update_statistics = is_training() && !checkpoint_recomputing();
  if (update_statistics && staging_) {
    if (staged_batches_ == 0) start_staged_update();
    ++staged_batches_;  // num_batches_tracked moves at the commit
    return normalise(x, staged_mean_, staged_var_);
  }
  if (update_statistics) {
    NoGradGuard no_grad;
    copy_(num_batches_tracked, add(num_batches_tracked, 1.0));
  }
  const bool use_running = !is_training() || update_statistics;
  return normalise(x, use_running ? running_mean : Tensor(), use_running ? running_var : Tensor());
}

Tensor BatchNorm2d::normalise(const Tensor& x, const Tensor& mean, const Tensor& var) {
  if (is_training() && all_reduce_sum_) return sync_batch_norm(x, mean, var, weight, bias, momentum_, eps_, all_reduce_sum_);
  return batch_norm(x, mean, var, weight, bias, is_training(), momentum_, eps_);
}

void BatchNorm2d::start_staged_update() {
  // Allocated once and reused (a captured step keeps its addresses); again
  // only when to() has moved or cast the running buffers since.
  auto staging_copy = [](Tensor& staged, const Tensor& running) {
    const bool fits = staged.defined() && staged.sizes() == running.sizes() && staged.dtype() == running.dtype() &&
                      staged.device() == running.device();
    if (!fits) staged = empty(running.sizes(), running.dtype(), running.device());
    copy_(staged, running);
  };
  NoGradGuard no_grad;
  staging_copy(staged_mean_, running_mean);
  staging_copy(staged_var_, running_var);
}

void BatchNorm2d::stage_statistics(bool on) {
  staging_ = on;
  staged_batches_ = 0;
}

void BatchNorm2d::commit_statistics_unless(const Tensor& found_inf) {
  if (staged_batches_ == 0) return;
  kernels::batch_norm_commit_unless(found_inf, staged_mean_, staged_var_, running_mean, running_var,
                                    num_batches_tracked, staged_batches_);
  staged_batches_ = 0;
}

namespace {

// f on every BatchNorm2d in the tree under (and including) module.
template <typename Fn>
void for_each_batch_norm(Module& module, Fn&& f) {
  if (auto* bn = dynamic_cast<BatchNorm2d*>(&module)) f(*bn);
  for (const auto& [name, child] : module.children()) for_each_batch_norm(*child, f);
}

}  // namespace

void stage_batch_norm_statistics(Module& model, bool on) {
  for_each_batch_norm(model, [on](BatchNorm2d& bn) { bn.stage_statistics(on); });
}

void commit_batch_norm_statistics_unless(Module& model, const Tensor& found_inf) {
  for_each_batch_norm(model, [&](BatchNorm2d& bn) { bn.commit_statistics_unless(found_inf); });
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  Tensor h = x;
  for (const auto& [name, child] : children()) h = child->forward(h);
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor ModuleList::forward(const Tensor&) { fail("ModuleList has no forward of its own: iterate over its modules"); }

}  // namespace mt::nn
