// Neural-network functions: softmax/log_softmax, layer_norm, cross_entropy,
// mse_loss, embedding, dropout. Forward and backward of each sit together.
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "core/graph.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/dropout/dropout.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/softmax/softmax.h"

namespace mt {

using autograd::record;
using autograd::save;

// ---------------------------------------------------------------- softmax

namespace {

// The softmax kernels work on the last dim: swap `dim` there (a free view),
// compute into a contiguous buffer, and swap back.
Tensor softmax_impl(const autograd::CastInputs& in, int64_t dim, bool log) {
  const Tensor& x = in[0];
  const char* name = in.name();
  autograd::check_floating(name, x);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  const int64_t last = std::max<int64_t>(x.dim() - 1, 0);
  const Tensor xt = x.dim() == 0 ? x : x.detach().transpose(d, last);
  Tensor yt = empty(xt.sizes(), x.dtype(), x.device());
  kernels::softmax_forward(xt, yt, log);
  Tensor y = x.dim() == 0 ? yt : yt.transpose(d, last);
  if (!autograd::needs_grad({x})) return y;
  // saves: output (f32 by policy)
  return record(in, y, [syt = save(yt), d, last, log, scalar = x.dim() == 0](const Tensor& g) {
    const Tensor yt_ = syt.get();
    const Tensor gt = scalar ? g : g.transpose(d, last);
    Tensor dxt = empty(yt_.sizes(), yt_.dtype(), yt_.device());
    kernels::softmax_backward(gt, yt_, dxt, log);
    return std::vector<Tensor>{scalar ? dxt : dxt.transpose(d, last)};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(autograd::autocast_inputs(amp::Op::Softmax, {x}), dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(autograd::autocast_inputs(amp::Op::LogSoftmax, {x}), dim, true);
}

// ---------------------------------------------------------------- layer_norm

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  const auto in = autograd::autocast_inputs(amp::Op::LayerNorm, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  autograd::check_floating("layer_norm", x);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  MT_CHECK(k >= 1 && x.dim() >= k && Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape,
           "layer_norm: input {} does not end in normalized_shape {}", x.shape_string(), shape_str(normalized_shape));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    MT_CHECK(p->sizes() == normalized_shape, "layer_norm: weight/bias shape {} must equal normalized_shape {}",
             p->shape_string(), shape_str(normalized_shape));
    autograd::check_same_device("layer_norm", x, *p);
  }
  MT_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got {}", eps);
  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType stats_dtype = x.dtype() == kF64 ? kF64 : kF32;  // statistics stay f32 for f16/bf16 inputs
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = empty({rows}, stats_dtype, x.device());
  Tensor rstd = empty({rows}, stats_dtype, x.device());
  kernels::layer_norm_forward(x, weight, bias, eps, y, mean, rstd);
  if (!autograd::needs_grad({x, weight, bias})) return y;
  // saves: input, weight, mean, rstd (f32 by policy; mean and rstd one per row)
  return record(in, y,
                [sx = save(x), sw = save(weight), smean = save(mean), srstd = save(rstd), nshape = normalized_shape,
                 bias_dtype = bias.defined() ? bias.dtype() : x.dtype(),
                 has_bias = bias.defined()](const Tensor& g) -> std::vector<Tensor> {
                  const Tensor x_ = sx.get(), w_ = sw.get();
                  Tensor dx = empty(x_.sizes(), x_.dtype(), x_.device());
                  Tensor dw = w_.defined() ? empty(nshape, w_.dtype(), x_.device()) : Tensor();
                  Tensor db = has_bias ? empty(nshape, bias_dtype, x_.device()) : Tensor();
                  kernels::layer_norm_backward(g, x_, w_, smean.get(), srstd.get(), dx, dw, db);
                  return {dx, dw, db};
                });
}

// ---------------------------------------------------------------- losses

Tensor cross_entropy(const Tensor& logits_uncast, const Tensor& target_in, const CrossEntropyOptions& options) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::CrossEntropy, {logits_uncast});
  const Tensor& logits_in = in[0];
  autograd::check_floating("cross_entropy", logits_in);
  autograd::check_index_tensor("cross_entropy", target_in);
  autograd::check_same_device("cross_entropy", logits_in, target_in);
  MT_CHECK(logits_in.dim() == 2 || logits_in.dim() == 1,
           "cross_entropy: expected logits [N, C] (or [C]), got {}; flatten extra dims into N first",
           logits_in.shape_string());
  MT_CHECK(logits_in.size(-1) > 0, "cross_entropy: logits {} have no classes", logits_in.shape_string());
  const bool unbatched = logits_in.dim() == 1;
  const Tensor logits = unbatched ? logits_in.unsqueeze(0) : logits_in;
  const Tensor target = unbatched ? target_in.reshape({1}) : target_in;
  MT_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
           "cross_entropy: target shape {} does not match logits {} (expected [{}] class indices)",
           target_in.shape_string(), logits_in.shape_string(), logits.size(0));
  MT_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got {}", options.label_smoothing);

  const int64_t n = logits.size(0);
  const DType loss_dtype = logits.dtype() == kF64 ? kF64 : kF32;  // losses are reported in f32
  Tensor row_loss = empty({n}, loss_dtype, logits.device());
  Tensor row_stats = empty({n, 2}, loss_dtype, logits.device());  // max, log sum exp(x - max)
  const kernels::CrossEntropyArgs args{options.ignore_index, options.label_smoothing};
  kernels::cross_entropy_forward(logits, target, row_loss, row_stats, args);

  // Mean divides by the number of targets that are not ignore_index, counted
  // on the device (reading the targets on the host would be a sync per step).
  Tensor counted;
  Tensor out;
  {
    NoGradGuard no_grad;
    if (options.reduction == Reduction::Mean) {
      counted = sum(ne(target, static_cast<double>(options.ignore_index)).to(loss_dtype));
    }
    switch (options.reduction) {
      case Reduction::None: out = unbatched ? row_loss.reshape({}) : row_loss; break;
      case Reduction::Sum: out = sum(row_loss); break;
      case Reduction::Mean: out = div(sum(row_loss), counted); break;
    }
  }
  if (!autograd::needs_grad({logits_in})) return out;
  // saves: logits (f32 by policy), target, stats (max, lse per row), count (mean only, on the device)
  return record(in, out,
                [sl = save(logits), st = save(target), sstats = save(row_stats), args, reduction = options.reduction,
                 sc = save(counted), n, in_shape = logits_in.sizes()](const Tensor& g) -> std::vector<Tensor> {
                  const Tensor logits_ = sl.get();
                  Tensor grad_rows;
                  if (reduction == Reduction::None) {
                    grad_rows = g.reshape({n});
                  } else {
                    const Tensor total = g.reshape({1});
                    grad_rows = (reduction == Reduction::Mean ? div(total, sc.get()) : total).expand({n});
                  }
                  Tensor dlogits = empty(logits_.sizes(), logits_.dtype(), logits_.device());
                  kernels::cross_entropy_backward(logits_, st.get(), sstats.get(), grad_rows, dlogits, args);
                  return {dlogits.reshape(in_shape)};
                });
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  // saves: nothing of its own (records no node: sub saves nothing, square the difference, sum/mean nothing)
  const auto in = autograd::autocast_inputs(amp::Op::MseLoss, {input_in, target_in});
  const Tensor& input = in[0];
  const Tensor& target = in[1];
  MT_CHECK(input.sizes() == target.sizes(), "mse_loss: input shape {} and target shape {} must match",
           input.shape_string(), target.shape_string());
  const Tensor squared = square(sub(input, target));
  switch (reduction) {
    case Reduction::None: return squared;
    case Reduction::Sum: return sum(squared);
    case Reduction::Mean: return mean(squared);
  }
  return squared;
}

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, std::optional<double> eps) {
  const auto in = autograd::autocast_inputs(amp::Op::RmsNorm, {x_in, weight_in});
  // One dtype for the kernel: the promoted one (f32 under autocast, by policy).
  const DType dtype = in[1].defined() ? promote_types(in[0].dtype(), in[1].dtype()) : in[0].dtype();
  Tensor x, weight;
  {
    const NoGradGuard untracked;  // the node below records against `in`, and hands back gradients in their dtypes
    x = in[0].to(dtype);
    weight = in[1].defined() ? in[1].to(dtype) : Tensor();
  }
  autograd::check_floating("rms_norm", x);
  const auto n = static_cast<int64_t>(normalized_shape.size());
  MT_CHECK(n > 0 && x.dim() >= n && Shape(x.sizes().end() - n, x.sizes().end()) == normalized_shape,
           "rms_norm: input {} does not end in the normalized shape {}", x.shape_string(), shape_str(normalized_shape));
  MT_CHECK(!weight.defined() || weight.sizes() == normalized_shape, "rms_norm: weight {} must have the shape {}",
           weight.defined() ? weight.shape_string() : std::string(), shape_str(normalized_shape));
  MT_CHECK(!eps || *eps >= 0, "rms_norm: eps must be non-negative, got {}", eps.value_or(0));
  if (weight.defined()) autograd::check_same_device("rms_norm", x, weight);
  // PyTorch's default: the machine epsilon of the input's dtype.
  const double epsilon = eps.value_or(in[0].dtype() == kF64    ? 2.220446049250313e-16
                                      : in[0].dtype() == kF16  ? 9.765625e-4
                                      : in[0].dtype() == kBF16 ? 7.8125e-3
                                                               : 1.1920928955078125e-07);
  const int64_t width = shape_numel(normalized_shape);
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  // One fused kernel (the layer_norm family's, not centered): the mean square
  // and rstd in f32 (f64 for f64) whatever the dtype, the output rounded once.
  Tensor y = empty(x.sizes(), dtype, x.device());
  Tensor rstd = empty({rows}, dtype == kF64 ? kF64 : kF32, x.device());
  kernels::rms_norm_forward(x, weight, epsilon, y, rstd);
  if (!autograd::needs_grad({x, weight})) return y;
  // saves: input, weight, rstd (f32 by policy; rstd one per row)
  return record(in, y,
                [sx = save(x), sw = save(weight), srstd = save(rstd), nshape = normalized_shape,
                 x_dtype = in[0].dtype(), w_dtype = in[1].defined() ? in[1].dtype() : dtype](const Tensor& g) {
                  const Tensor x_ = sx.get(), w_ = sw.get();
                  Tensor dx = empty(x_.sizes(), x_.dtype(), x_.device());
                  Tensor dw = w_.defined() ? empty(nshape, w_.dtype(), x_.device()) : Tensor();
                  kernels::rms_norm_backward(g.to(x_.dtype()), x_, w_, srstd.get(), dx, dw);
                  return std::vector<Tensor>{dx.to(x_dtype), dw.defined() ? dw.to(w_dtype) : Tensor()};
                });
}

// ---------------------------------------------------------------- rope and swiglu (the Llama family's)

Tensor rope(const Tensor& x_in, const Tensor& cos, const Tensor& sin) {
  const auto in = autograd::autocast_inputs(amp::Op::Rope, {x_in});
  const Tensor& x = in[0];
  autograd::check_floating("rope", x);
  MT_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, "rope: expected x [..., T, D] with an even D, got {}",
           x.shape_string());
  const Shape table{x.size(-2), x.size(-1)};
  MT_CHECK(cos.sizes() == table && sin.sizes() == table, "rope: cos {} and sin {} must be [T, D] = {} for x {}",
           cos.shape_string(), sin.shape_string(), shape_str(table), x.shape_string());
  autograd::check_same_device("rope", x, cos);
  autograd::check_same_device("rope", x, sin);
  const DType acc = x.dtype() == kF64 ? kF64 : kF32;
  Tensor c, s;
  {
    const NoGradGuard constants;  // the tables get no gradient
    c = cos.detach().to(acc).contiguous();
    s = sin.detach().to(acc).contiguous();
  }
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  kernels::rope(x, c, s, y, /*backward=*/false);
  if (!autograd::needs_grad({x})) return y;
  // saves: cos, sin (the tables' rows, f32)
  return record(in, y, [sc = save(c), ss = save(s)](const Tensor& g) -> std::vector<Tensor> {
    Tensor dx = empty(g.sizes(), g.dtype(), g.device());
    kernels::rope(g, sc.get(), ss.get(), dx, /*backward=*/true);  // the rotation's transpose
    return {dx};
  });
}

Tensor swiglu(const Tensor& gate_in, const Tensor& up_in) {
  const auto in = autograd::autocast_inputs(amp::Op::Swiglu, {gate_in, up_in});
  const DType dtype = promote_types(in[0].dtype(), in[1].dtype());
  autograd::check_floating("swiglu", in[0]);
  autograd::check_same_device("swiglu", in[0], in[1]);
  MT_CHECK(in[0].sizes() == in[1].sizes(), "swiglu: gate {} and up {} must have one shape", in[0].shape_string(),
           in[1].shape_string());
  Tensor gate, up;
  {
    const NoGradGuard untracked;  // the node below records against `in`
    gate = in[0].to(dtype);
    up = in[1].to(dtype);
  }
  Tensor y = empty(gate.sizes(), dtype, gate.device());
  kernels::swiglu_forward(gate, up, y);
  if (!autograd::needs_grad({in[0], in[1]})) return y;
  // saves: gate, up
  return record(in, y,
                [sg = save(gate), su = save(up), gate_dtype = in[0].dtype(),
                 up_dtype = in[1].dtype()](const Tensor& g) -> std::vector<Tensor> {
                  const Tensor gate_ = sg.get(), up_ = su.get();
                  Tensor dg = empty(gate_.sizes(), gate_.dtype(), gate_.device());
                  Tensor du = empty(up_.sizes(), up_.dtype(), up_.device());
                  kernels::swiglu_backward(g, gate_, up_, dg, du);
                  return {dg.to(gate_dtype), du.to(up_dtype)};
                });
}

// ---------------------------------------------------------------- embedding and dropout

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  MT_CHECK(weight.dim() == 2, "embedding: weight must be [num_embeddings, dim], got {}", weight.shape_string());
  autograd::check_index_tensor("embedding", indices);
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  try {
    return index_select(weight, 0, indices.reshape({indices.numel()})).reshape(out_shape);
  } catch (const Error& e) {
    fail("embedding (weight {}, indices {}): {}", weight.shape_string(), indices.shape_string(), e.what());
  }
}

Tensor dropout(const Tensor& x_in, double p, bool training, Generator* generator) {
  MT_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got {}", p);
  if (!training || p == 0) return x_in;
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Dropout, {x_in});
  const Tensor& x = in[0];
  autograd::check_floating("dropout", x);
  MT_CHECK(!graph_capture_active(),
           "dropout cannot be captured in a CUDA graph yet: its random offset is drawn on the host, so every replay "
           "would repeat one mask");
  const auto n = static_cast<uint64_t>(x.numel());
  const GeneratorState s = (generator ? *generator : default_generator()).reserve((n + 3) / 4);
  Tensor out = empty(x.sizes(), x.dtype(), x.device());
  Tensor mask = empty(x.sizes(), kU8, x.device());
  kernels::dropout_forward(x, out, mask, {p, s.seed, s.offset});
  if (!autograd::needs_grad({x})) return out;
  // saves: mask (u8)
  return record(in, out, [smask = save(mask), p](const Tensor& g) -> std::vector<Tensor> {
    const Tensor m = smask.get();
    Tensor gx = empty(g.sizes(), g.dtype(), g.device());
    kernels::dropout_backward(g, m, gx, p);
    return {gx};
  });
}

}  // namespace mt
