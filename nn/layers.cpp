#include "nn/layers.h"

#include <cmath>

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

Tensor Linear::forward(const Tensor& x) { return forward(x, LinearActivation::None); }
Tensor Linear::forward(const Tensor& x, LinearActivation activation) {
  const ForwardScope scope(*this);
  if (input_smooth.defined() && !is_int8()) {
    const Tensor smoothed = x / input_smooth.to(x.dtype());
    report_input(smoothed);
    return linear(smoothed, weight, bias, activation);
  }
  report_input(x);
  if (is_int8()) return int8::linear(x, int8_weight(), int8_input(), bias, activation, requantization_for(x));
  return linear(x, weight, bias, activation);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}{}", weight.size(1), weight.size(0), bias.defined(),
                     is_int8() ? ", int8" : "");
}

void QuantizableLayer::to_int8(const int8::Int8Tensor& q, double scale, int32_t zero_point) {
  MT_CHECK(!is_int8(), "{}::to_int8: the layer is INT8 already", name());
  const std::string reason = int8_unsupported_reason();
  MT_CHECK(reason.empty(), "{}::to_int8: {}", name(), reason);
  MT_CHECK(q.data.dtype() == kI8 && q.axis == 0 && q.data.sizes() == weight.sizes(),
           "{}::to_int8: expected an i8 {} weight quantized per output channel, got {} {}", name(),
           weight.shape_string(), q.data.dtype(), q.data.shape_string());
  int8::check(q, name() + "::to_int8");
  const Device device = weight.device();
  const NoGradGuard no_grad;
  weight = q.data.to(device);
  register_buffer("weight_scale", weight_scale, q.scales.to(kF32).to(device));
  register_buffer("weight_zero_point", weight_zero_point, q.zero_points.to(device));
  register_buffer("input_scale", input_scale, scalar_tensor(scale, kF32, device));
  register_buffer("input_zero_point", input_zero_point, scalar_tensor(zero_point, kI32, device));
  check_int8();
}

void QuantizableLayer::requantize_output(const int8::Requantization& r) {
  MT_CHECK(is_int8(), "{}::requantize_output: the layer is not INT8", name());
  MT_CHECK(std::isfinite(r.scale) && r.scale > 0 && r.zero_point >= 0 && r.zero_point <= 255,
           "{}::requantize_output: a u8 output needs a finite positive scale and a zero point in [0, 255], got {} "
           "and {}",
           name(), r.scale, r.zero_point);
  requantize_ = r;
}

void QuantizableLayer::smooth(const Tensor& s) {
  MT_CHECK(weight.dim() == 2, "{}::smooth: SmoothQuant applies to Linear layers", name());
  MT_CHECK(!is_int8() && !input_smooth.defined(), "{}::smooth: the layer is smoothed or INT8 already", name());
  MT_CHECK(s.dim() == 1 && s.size(0) == weight.size(1), "{}::smooth: expected {} factors, got {}", name(),
           weight.size(1), s.shape_string());
  const std::vector<double> factors = s.to_vector();
  for (size_t j = 0; j < factors.size(); ++j) {
    MT_CHECK(std::isfinite(factors[j]) && factors[j] > 0,
             "{}::smooth: factor {} of input channel {} is not a finite positive number", name(), factors[j], j);
  }
  const NoGradGuard no_grad;
  const Tensor factors32 = s.to(kF32).to(weight.device());
  copy_(weight, weight * factors32.to(weight.dtype()).reshape({1, -1}));
  register_buffer("input_smooth", input_smooth, factors32);
}

void QuantizableLayer::make_int8_slots(bool smoothed) {
  const int64_t out = weight.size(0);
  const Device device = weight.device();
  if (smoothed) smooth(ones({weight.size(1)}, kF32, device));
  to_int8({.data = zeros(weight.sizes(), kI8, device),
           .scales = ones({out}, kF32, device),
           .zero_points = zeros({out}, kI32, device),
           .axis = 0},
          1.0, 128);
}

int8::Int8Tensor QuantizableLayer::int8_weight() const {
  return {.data = weight, .scales = weight_scale, .zero_points = weight_zero_point, .axis = 0};
}

int8::InputQuantization QuantizableLayer::int8_input() const {
  int8::InputQuantization input{.scale = input_scale, .zero_point = input_zero_point, .smooth = input_smooth};
  const std::shared_ptr<Storage> checked = checked_zero_point_storage_.lock();
  if (checked != nullptr && checked == input_zero_point.storage() &&
      checked->version() == checked_zero_point_version_) {
    input.zero_point_value = checked_zero_point_;
  }
  return input;
}

void QuantizableLayer::check_int8() const {
  MT_CHECK(is_int8(), "{}::check_int8: the layer is not INT8", name());
  MT_CHECK(int8_unsupported_reason().empty(), "{} (INT8): {}", name(), int8_unsupported_reason());
  int8::check(int8_weight(), name() + " (INT8) weight");
  int8::check({.data = empty({1}, kU8, input_scale.device()),
               .scales = input_scale.reshape({1}),
               .zero_points = input_zero_point.reshape({1})},
              name() + " (INT8) input");
  if (input_smooth.defined()) {
    int8::check({.data = empty({1, input_smooth.numel()}, kU8, input_smooth.device()),
                 .scales = input_smooth,
                 .zero_points = zeros({input_smooth.numel()}, kI32, input_smooth.device()),
                 .axis = 1},
                name() + " (INT8) input_smooth");
    MT_CHECK(weight.dim() == 2 && input_smooth.numel() == weight.size(1),
             "{} (INT8): {} smoothing factors for a weight {}", name(), input_smooth.numel(), weight.shape_string());
  }
  checked_zero_point_ = static_cast<int32_t>(input_zero_point.item<double>());  // in range: checked above
  checked_zero_point_storage_ = input_zero_point.storage();
  checked_zero_point_version_ = input_zero_point.storage()->version();
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

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape_), eps_, weight.defined());
}

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  MT_CHECK(!normalized_shape_.empty(), "RMSNorm: normalized_shape must name at least one dim");
  MT_CHECK(!eps || *eps >= 0, "RMSNorm: eps must be non-negative, got {}", eps.value_or(0));
  if (elementwise_affine) register_parameter("weight", weight, ones(normalized_shape_));
}

Tensor RMSNorm::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  return rms_norm(x, normalized_shape_, weight, eps_);
}

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape_),
                     eps_ ? fmt::format("{}", *eps_) : std::string("None"), weight.defined());
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  const ForwardScope scope(*this);
  return embedding(weight, indices);
}

std::string Embedding::extra_repr() const { return fmt::format("{}, {}", weight.size(0), weight.size(1)); }

std::string Dropout::extra_repr() const { return fmt::format("p={}", p_); }

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
  report_input(x);
  if (is_int8()) {
    return int8::conv2d(x, int8_weight(), int8_input(), bias, stride_, padding_, dilation_, requantization_for(x));
  }
  return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_);
}

void Conv2d::fold_batch_norm(BatchNorm2d& bn) {
  const int64_t channels = weight.size(0);
  MT_CHECK(!is_int8(), "Conv2d::fold_batch_norm: fold before converting to INT8 (the weights are i8 already)");
  MT_CHECK(!bn.is_folded(), "Conv2d::fold_batch_norm: the batch norm is folded already");
  MT_CHECK(bn.running_mean.defined() && bn.running_mean.numel() == channels,
           "Conv2d::fold_batch_norm: a batch norm of {} channels after a convolution of {} output channels",
           bn.running_mean.defined() ? bn.running_mean.numel() : 0, channels);
  const std::vector<double> mean = bn.running_mean.to_vector(), var = bn.running_var.to_vector();
  const std::vector<double> gamma = bn.weight.defined() ? bn.weight.to_vector() : std::vector<double>(mean.size(), 1);
  const std::vector<double> beta = bn.bias.defined() ? bn.bias.to_vector() : std::vector<double>(mean.size(), 0);
  std::vector<double> b = bias.defined() ? bias.to_vector() : std::vector<double>(mean.size(), 0);
  std::vector<double> s(mean.size());
  for (size_t o = 0; o < s.size(); ++o) {
    s[o] = gamma[o] / std::sqrt(var[o] + bn.eps());
    MT_CHECK(std::isfinite(s[o]), "Conv2d::fold_batch_norm: channel {}'s scale gamma / sqrt(var + eps) is {}", o, s[o]);
    b[o] = (b[o] - mean[o]) * s[o] + beta[o];
  }
  const NoGradGuard no_grad;
  const Tensor scale = from_vector(s, {channels, 1, 1, 1}, kF64).to(weight.device());
  copy_(weight, mul(weight.to(kF64), scale).to(weight.dtype()));
  make_bias_slot();
  copy_(bias, from_vector(b, {channels}, kF64).to(bias.dtype()).to(bias.device()));
  bn.mark_folded();
}

void Conv2d::make_bias_slot() {
  if (bias.defined()) return;
  register_parameter("bias", bias, zeros({weight.size(0)}, weight.dtype(), weight.device()));
}

std::string Conv2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({}, {}), stride=({}, {}), padding=({}, {}), groups={}, bias={}{}",
                     weight.size(1) * groups_, weight.size(0), weight.size(2), weight.size(3), stride_.h, stride_.w,
                     padding_.h, padding_.w, groups_, bias.defined(), is_int8() ? ", int8" : "");
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}", weight.size(0), eps_, momentum_);
}

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool batch_first)
    : embed_dim_(embed_dim), num_heads_(num_heads), dropout_(dropout), batch_first_(batch_first) {
  MT_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
           "MultiheadAttention: embed_dim {} must be a positive multiple of num_heads {}", embed_dim, num_heads);
  MT_CHECK(dropout >= 0 && dropout <= 1, "MultiheadAttention: dropout must be in [0, 1], got {}", dropout);
  // PyTorch's initialisation: xavier_uniform_ in_proj_weight, zero biases,
  // out_proj a Linear (its default weight init) with a zero bias.
  register_parameter("in_proj_weight", in_proj_weight, empty({3 * embed_dim, embed_dim}));
  init::xavier_uniform_(in_proj_weight);
  if (bias) register_parameter("in_proj_bias", in_proj_bias, zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  if (bias) {
    const NoGradGuard no_grad;
    fill_(out_proj->bias, 0.0);
  }
}

namespace {

// [N, T, E] -> [N, H, T, E / H]
Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// PyTorch's module masks say where NOT to attend (true) or what to add;
// sdpa's bool mask says where attention is allowed. attn_mask [L, S] or
// [N * H, L, S] becomes broadcastable to [N, H, L, S].
Tensor sdpa_mask(const Tensor& attn_mask, int64_t batch, int64_t heads) {
  if (!attn_mask.defined()) return Tensor();
  Tensor m = attn_mask.dtype() == kBool ? eq(attn_mask, 0.0) : attn_mask;
  if (m.dim() == 3) {
    MT_CHECK(m.size(0) == batch * heads,
             "MultiheadAttention: a 3-D attn_mask must be [N * num_heads, L, S] = [{}, ...], got {}", batch * heads,
             m.shape_string());
    m = m.reshape({batch, heads, m.size(1), m.size(2)});
  } else {
    MT_CHECK(m.dim() == 2, "MultiheadAttention: attn_mask must be [L, S] or [N * num_heads, L, S], got {}",
             m.shape_string());
  }
  return m;
}

}  // namespace

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask, bool is_causal) {
  const ForwardScope scope(*this);
  MT_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(2) == embed_dim_ &&
               key.size(2) == embed_dim_ && value.size(2) == embed_dim_,
           "MultiheadAttention: query, key and value must be 3-D with {} features ({}), got {}, {}, {}", embed_dim_,
           batch_first_ ? "[N, L, E]" : "[L, N, E]", query.shape_string(), key.shape_string(), value.shape_string());
  // Work batch-first: [N, T, E].
  const Tensor q_in = batch_first_ ? query : query.transpose(0, 1);
  const Tensor k_in = batch_first_ ? key : key.transpose(0, 1);
  const Tensor v_in = batch_first_ ? value : value.transpose(0, 1);
  const int64_t E = embed_dim_, batch = q_in.size(0);
  auto projection = [&](const Tensor& x, int64_t which) {
    const Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * E, E) : Tensor();
    return split_heads(linear(x, in_proj_weight.narrow(0, which * E, E), b), num_heads_);
  };
  AttentionOptions options;
  options.key_padding_mask = key_padding_mask;
  options.attn_mask = sdpa_mask(attn_mask, batch, num_heads_);
  options.is_causal = is_causal;
  options.dropout_p = is_training() ? dropout_ : 0.0;
  const Tensor heads = scaled_dot_product_attention(projection(q_in, 0), projection(k_in, 1), projection(v_in, 2),
                                                    options);  // [N, H, L, D]
  const Tensor merged = heads.transpose(1, 2).reshape({batch, q_in.size(1), E});
  const Tensor out = out_proj->forward(merged);
  return batch_first_ ? out : out.transpose(0, 1);
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, batch_first={}", embed_dim_, num_heads_, dropout_,
                     batch_first_);
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
  if (folded_) {
    MT_CHECK(!is_training(),
             "BatchNorm2d: this layer is folded into the convolution before it (an INT8 or folded "
             "checkpoint): it normalises with frozen statistics and cannot train");
    return x;
  }
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
  if (is_training() && all_reduce_sum_)
    return sync_batch_norm(x, mean, var, weight, bias, momentum_, eps_, all_reduce_sum_);
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

void ModuleSequence::push_back(std::shared_ptr<Module> module) {
  modules_.push_back(register_module(std::to_string(modules_.size()), std::move(module)));
}

const std::shared_ptr<Module>& ModuleSequence::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), "{}[{}]: it holds {} modules", name(), i, modules_.size());
  return modules_[i];
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  const ForwardScope scope(*this);
  Tensor h = x;
  for (const auto& child : *this) h = child->forward(h);
  return h;
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

}  // namespace mt::nn
