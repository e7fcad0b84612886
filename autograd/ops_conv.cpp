// Convolution, pooling and batch norm: conv2d, max_pool2d, avg_pool2d,
// adaptive_avg_pool2d, batch_norm. Forward and backward of each sit together;
// the kernels are in kernels/{conv,pool,batch_norm}/cpu.cpp.
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "kernels/batch_norm/batch_norm.h"
#include "kernels/conv/conv.h"
#include "kernels/pool/pool.h"

namespace mt {

using autograd::record;
using autograd::save;

namespace {

std::string pair_str(Size2 p) { return fmt::format("({}, {})", p.h, p.w); }

// Empty tensors like `t` for the gradients that are needed (undefined
// otherwise).
Tensor grad_buffer(bool needed, const Shape& shape, DType dtype, Device device) {
  return needed ? empty(shape, dtype, device) : Tensor();
}

}  // namespace

namespace autograd {

kernels::ConvShape conv2d_geometry(const Tensor& x, const Shape& w, Size2 stride, Size2 padding, Size2 dilation,
                                   int64_t groups) {
  MT_CHECK(x.dim() == 4, "conv2d: expected input [N, C, H, W], got {}", x.shape_string());
  MT_CHECK(w.size() == 4,
           "conv2d: expected weight [out_channels, in_channels/groups, kH, "
           "kW], got {}",
           shape_str(w));
  MT_CHECK(stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 && padding.h >= 0 && padding.w >= 0,
           "conv2d: stride {} and dilation {} must be positive and padding {} "
           "non-negative",
           pair_str(stride), pair_str(dilation), pair_str(padding));
  const int64_t channels = x.size(1), out_channels = w[0];
  MT_CHECK(groups > 0 && channels % groups == 0 && out_channels % groups == 0,
           "conv2d: groups = {} must divide both in_channels = {} (input {}) "
           "and out_channels = {} (weight {})",
           groups, channels, x.shape_string(), out_channels, shape_str(w));
  MT_CHECK(w[1] * groups == channels,
           "conv2d: input {} has {} channels but weight {} expects {} "
           "(in_channels/groups = {} with groups = {})",
           x.shape_string(), channels, shape_str(w), w[1] * groups, w[1], groups);
  kernels::ConvShape g;
  g.batch = x.size(0);
  g.in_channels = channels;
  g.in_h = x.size(2);
  g.in_w = x.size(3);
  g.out_channels = out_channels;
  g.kernel_h = w[2];
  g.kernel_w = w[3];
  g.stride_h = stride.h;
  g.stride_w = stride.w;
  g.pad_h = padding.h;
  g.pad_w = padding.w;
  g.dilation_h = dilation.h;
  g.dilation_w = dilation.w;
  g.groups = groups;
  const int64_t span_h = dilation.h * (g.kernel_h - 1) + 1, span_w = dilation.w * (g.kernel_w - 1) + 1;
  MT_CHECK(g.in_h + 2 * padding.h >= span_h && g.in_w + 2 * padding.w >= span_w,
           "conv2d: kernel {} (dilated extent {}x{}) is larger than the padded "
           "input {}x{} (input {}, padding {})",
           shape_str(w), span_h, span_w, g.in_h + 2 * padding.h, g.in_w + 2 * padding.w, x.shape_string(),
           pair_str(padding));
  g.out_h = (g.in_h + 2 * padding.h - span_h) / stride.h + 1;
  g.out_w = (g.in_w + 2 * padding.w - span_w) / stride.w + 1;

  return g;
}

}  // namespace autograd

// ---------------------------------------------------------------- conv2d

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Size2 stride, Size2 padding,
              Size2 dilation, int64_t groups) {
  const auto in = autograd::autocast_inputs(amp::Op::Conv2d, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  autograd::check_floating("conv2d", x);
  autograd::check_same_device("conv2d", x, weight);
  MT_CHECK(x.dtype() == weight.dtype(), "conv2d: input ({}) and weight ({}) must have the same dtype", x.dtype(),
           weight.dtype());
  const kernels::ConvShape g = autograd::conv2d_geometry(x, weight.sizes(), stride, padding, dilation, groups);
  const int64_t out_channels = g.out_channels;
  if (bias.defined()) {
    MT_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: bias {} must be [{}] (weight {})",
             bias.shape_string(), out_channels, weight.shape_string());
    autograd::check_same_device("conv2d", x, bias);
    MT_CHECK(bias.dtype() == x.dtype(), "conv2d: bias ({}) must have the input's dtype ({})", bias.dtype(), x.dtype());
  }
  Tensor y = empty({g.batch, out_channels, g.out_h, g.out_w}, x.dtype(), x.device());
  kernels::conv2d_forward(x, weight, bias, g, y);
  const bool need_x = autograd::needs_grad({x});
  const bool need_w = autograd::needs_grad({weight});
  const bool need_b = bias.defined() && autograd::needs_grad({bias});
  if (!need_x && !need_w && !need_b) return y;
  // saves: input, weight (compute dtype): x only for dW, the weight only for dx
  return record(in, y,
                [sx = save(need_w ? x : Tensor()), sw = save(need_x ? weight : Tensor()), g, need_x, need_w, need_b,
                 xshape = x.sizes(), wshape = weight.sizes(), dtype = x.dtype()](const Tensor& gy) {
                  const Tensor x_ = sx.get(), w_ = sw.get();
                  Tensor dx = grad_buffer(need_x, xshape, dtype, gy.device());
                  Tensor dw = grad_buffer(need_w, wshape, dtype, gy.device());
                  Tensor db = grad_buffer(need_b, {g.out_channels}, dtype, gy.device());
                  kernels::conv2d_backward(gy, x_, w_, g, dx, dw, db);
                  return std::vector<Tensor>{dx, dw, db};
                });
}

// ---------------------------------------------------------------- pooling

namespace {

// The pooled view of x: checks [N, C, H, W] or [C, H, W] and the window,
// returns the output shape.
Shape pool_output_shape(const char* op, const Tensor& x, Size2 kernel, Size2 stride, Size2 padding,
                        bool takes_u8 = false) {
  if (!(takes_u8 && x.dtype() == kU8)) autograd::check_floating(op, x);
  MT_CHECK(x.dim() == 3 || x.dim() == 4, "{}: expected input [N, C, H, W] or [C, H, W], got {}", op, x.shape_string());
  MT_CHECK(kernel.h > 0 && kernel.w > 0 && stride.h > 0 && stride.w > 0,
           "{}: kernel {} and stride {} must be positive (input {})", op, pair_str(kernel), pair_str(stride),
           x.shape_string());
  MT_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2,
           "{}: padding {} must be non-negative and at most half the kernel {} "
           "(input {})",
           op, pair_str(padding), pair_str(kernel), x.shape_string());
  const int64_t h = x.size(-2), w = x.size(-1);
  MT_CHECK(h + 2 * padding.h >= kernel.h && w + 2 * padding.w >= kernel.w,
           "{}: kernel {} is larger than the padded input {}x{} (input {}, "
           "padding {})",
           op, pair_str(kernel), h + 2 * padding.h, w + 2 * padding.w, x.shape_string(), pair_str(padding));
  Shape out(x.sizes().begin(), x.sizes().end() - 2);
  out.push_back((h + 2 * padding.h - kernel.h) / stride.h + 1);
  out.push_back((w + 2 * padding.w - kernel.w) / stride.w + 1);
  return out;
}

kernels::Pool2dWindow make_window(Size2 kernel, Size2 stride, Size2 padding, bool count_include_pad) {
  return {kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, count_include_pad};
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, Size2 kernel, Size2 stride, Size2 padding) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::MaxPool2d, {x_in});
  const Tensor& x = in[0];
  // u8 too (on the CPU): the maximum of quantized values is the quantized
  // maximum, so an INT8 chain's activations pool as they are.
  const Shape out_shape = pool_output_shape("max_pool2d", x, kernel, stride, padding, /*takes_u8=*/true);
  Tensor y = empty(out_shape, x.dtype(), x.device());
  const bool grad = autograd::needs_grad({x});
  const Tensor indices = grad ? empty(out_shape, kI64, x.device()) : Tensor();  // only the backward reads them
  const kernels::Pool2dWindow window = make_window(kernel, stride, padding, true);
  kernels::max_pool2d_forward(x, window, y, indices);
  if (!grad) return y;
  // saves: indices (i64)
  return record(in, y, [si = save(indices), window, xshape = x.sizes(), dtype = x.dtype()](const Tensor& gy) {
    Tensor dx = empty(xshape, dtype, gy.device());
    kernels::max_pool2d_backward(gy, si.get(), window, dx);
    return std::vector<Tensor>{dx};
  });
}

Tensor avg_pool2d(const Tensor& x_in, Size2 kernel, Size2 stride, Size2 padding, bool count_include_pad) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::AvgPool2d, {x_in});
  const Tensor& x = in[0];
  const Shape out_shape = pool_output_shape("avg_pool2d", x, kernel, stride, padding);
  const kernels::Pool2dWindow window = make_window(kernel, stride, padding, count_include_pad);
  Tensor y = empty(out_shape, x.dtype(), x.device());
  kernels::avg_pool2d_forward(x, window, y);
  if (!autograd::needs_grad({x})) return y;
  // saves: nothing (window and input shape only)
  return record(
      in, y,
      [window, xshape = x.sizes(), dtype = x.dtype()](const Tensor& gy) {
        Tensor dx = empty(xshape, dtype, gy.device());
        kernels::avg_pool2d_backward(gy, window, dx);
        return std::vector<Tensor>{dx};
      },
      /*saves_tensors=*/false);
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, Size2 output_size) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::AdaptiveAvgPool2d, {x_in});
  const Tensor& x = in[0];
  autograd::check_floating("adaptive_avg_pool2d", x);
  MT_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_avg_pool2d: expected input [N, C, H, W] or [C, H, W], got {}",
           x.shape_string());
  MT_CHECK(output_size.h > 0 && output_size.w > 0 && x.size(-2) > 0 && x.size(-1) > 0,
           "adaptive_avg_pool2d: output size {} and input {} spatial size must "
           "be positive",
           pair_str(output_size), x.shape_string());
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 2);
  out_shape.push_back(output_size.h);
  out_shape.push_back(output_size.w);
  Tensor y = empty(out_shape, x.dtype(), x.device());
  kernels::adaptive_avg_pool2d_forward(x, y);
  if (!autograd::needs_grad({x})) return y;
  // saves: nothing (input shape only)
  return record(
      in, y,
      [xshape = x.sizes(), dtype = x.dtype()](const Tensor& gy) {
        Tensor dx = empty(xshape, dtype, gy.device());
        kernels::adaptive_avg_pool2d_backward(gy, dx);
        return std::vector<Tensor>{dx};
      },
      /*saves_tensors=*/false);
}

// ---------------------------------------------------------------- batch_norm

namespace {

void check_batch_norm_arguments(const char* op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& weight, const Tensor& bias, bool training, double eps) {
  autograd::check_floating(op, x);
  MT_CHECK(x.dim() >= 2, "{}: expected input [N, C, ...], got {}", op, x.shape_string());
  const int64_t channels = x.size(1);
  const std::pair<const char*, const Tensor*> per_channel[] = {
      {"weight", &weight}, {"bias", &bias}, {"running_mean", &running_mean}, {"running_var", &running_var}};
  for (const auto& [name, t] : per_channel) {
    if (!t->defined()) continue;
    MT_CHECK(t->dim() == 1 && t->size(0) == channels, "{}: {} {} must be [{}] for input {} (C = {})", op, name,
             t->shape_string(), channels, x.shape_string(), channels);
    autograd::check_floating(op, *t);
    autograd::check_same_device(op, x, *t);
  }
  MT_CHECK(training || (running_mean.defined() && running_var.defined()),
           "{}: eval mode (training = false) needs running_mean and running_var (input {})", op, x.shape_string());
  MT_CHECK(!training || x.numel() / std::max<int64_t>(channels, 1) > 1 || x.numel() == 0,
           "{}: expected more than 1 value per channel when training, got input {}", op, x.shape_string());
  MT_CHECK(eps >= 0, "{}: eps must be non-negative, got {}", op, eps);
}

// The dims a batch norm reduces over ([N, C, ...]: all but 1), and the shape a per-channel [C] broadcasts as.
Shape reduced_dims(const Tensor& x) {
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}
Shape channel_shape(const Tensor& x) {
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return shape;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  const auto in = autograd::autocast_inputs(amp::Op::BatchNorm, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  check_batch_norm_arguments("batch_norm", x, running_mean, running_var, weight, bias, training, eps);
  const int64_t channels = x.size(1);

  const DType stats_dtype = x.dtype() == kF64 ? kF64 : kF32;
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  Tensor save_mean = empty({channels}, stats_dtype, x.device());
  Tensor save_invstd = empty({channels}, stats_dtype, x.device());
  kernels::batch_norm_forward(x, weight, bias, running_mean, running_var, {training, momentum, eps}, y, save_mean,
                              save_invstd);
  const bool need_x = autograd::needs_grad({x});
  const bool need_w = weight.defined() && autograd::needs_grad({weight});
  const bool need_b = bias.defined() && autograd::needs_grad({bias});
  if (!need_x && !need_w && !need_b) return y;
  // saves: input, weight (their dtypes), mean, invstd (f32, one per channel)
  return record(in, y,
                [sx = save(x), sw = save(weight), smean = save(save_mean), sinvstd = save(save_invstd), training,
                 need_x, need_w, need_b, wdtype = weight.defined() ? weight.dtype() : x.dtype(),
                 bdtype = bias.defined() ? bias.dtype() : x.dtype()](const Tensor& gy) {
                  const Tensor x_ = sx.get(), w_ = sw.get();
                  const Shape cshape{x_.size(1)};
                  Tensor dx = grad_buffer(need_x, x_.sizes(), x_.dtype(), x_.device());
                  Tensor dw = grad_buffer(need_w, cshape, wdtype, x_.device());
                  Tensor db = grad_buffer(need_b, cshape, bdtype, x_.device());
                  kernels::batch_norm_backward(gy, x_, w_, smean.get(), sinvstd.get(), training, dx, dw, db);
                  return std::vector<Tensor>{dx, dw, db};
                });
}

// ---------------------------------------------------------------- sync_batch_norm

Tensor sync_batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight_in, const Tensor& bias_in, double momentum, double eps,
                       const AllReduceSum& all_reduce_sum) {
  const auto in = autograd::autocast_inputs(amp::Op::SyncBatchNorm, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  check_batch_norm_arguments("sync_batch_norm", x, running_mean, running_var, weight, bias, true, eps);
  MT_CHECK(all_reduce_sum != nullptr, "sync_batch_norm: needs an all-reduce (a world of one: one that does nothing)");
  const int64_t channels = x.size(1);
  const DType acc = x.dtype() == kF64 ? kF64 : kF32;
  const Shape dims = reduced_dims(x), per_channel = channel_shape(x);
  Tensor mean_all, var_all, count;
  {
    NoGradGuard no_grad;
    // This rank's count, mean and sum of squared deviations per channel, in f32 (f64).
    const Tensor xa = x.to(acc);
    const double local_count = static_cast<double>(x.numel() / std::max<int64_t>(channels, 1));
    const Tensor local_mean = mean(xa, dims);
    const Tensor centered = sub(xa, local_mean.reshape(per_channel));
    const Tensor local_m2 = sum(mul(centered, centered), dims);
    // Chan's combination: N = sum n_r, mean = sum n_r mean_r / N, then
    // M2 = sum (M2_r + n_r (mean_r - mean)^2): no E[x^2] - mean^2 to cancel.
    Tensor first = cat({full({1}, local_count, acc, x.device()), mul(local_mean, local_count)}, 0).contiguous();
    all_reduce_sum(first);
    count = first.narrow(0, 0, 1).clone();  // its own 4 bytes: the tape keeps it
    mean_all = div(first.narrow(0, 1, channels), count);
    const Tensor shift = sub(local_mean, mean_all);
    Tensor second = add(local_m2, mul(mul(shift, shift), local_count)).contiguous();
    all_reduce_sum(second);
    var_all = div(second, count);  // biased: what normalises
    if (running_mean.defined()) {
      copy_(running_mean, add(mul(running_mean, 1.0 - momentum), mul(mean_all, momentum).to(running_mean.dtype())));
    }
    if (running_var.defined()) {
      const Tensor unbiased = div(second, sub(count, 1.0));
      copy_(running_var, add(mul(running_var, 1.0 - momentum), mul(unbiased, momentum).to(running_var.dtype())));
    }
  }
  // Normalise with the global statistics: the kernel's eval mode reads them as given.
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  Tensor save_mean = empty({channels}, acc, x.device());
  Tensor save_invstd = empty({channels}, acc, x.device());
  kernels::batch_norm_forward(x, weight, bias, mean_all, var_all, {false, momentum, eps}, y, save_mean, save_invstd);
  const bool need_x = autograd::needs_grad({x});
  const bool need_w = weight.defined() && autograd::needs_grad({weight});
  const bool need_b = bias.defined() && autograd::needs_grad({bias});
  if (!need_x && !need_w && !need_b) return y;
  // saves: input, weight, mean, invstd, count (f32 mean, invstd per channel, count over the ranks; the all-reduce)
  return record(
      in, y,
      [sx = save(x), sw = save(weight), smean = save(save_mean), sinvstd = save(save_invstd), scount = save(count),
       all_reduce_sum, need_x, need_w, need_b, acc, wdtype = weight.defined() ? weight.dtype() : x.dtype(),
       bdtype = bias.defined() ? bias.dtype() : x.dtype()](const Tensor& gy) {
        NoGradGuard no_grad;
        const Tensor x_ = sx.get(), w_ = sw.get(), invstd = sinvstd.get(), n = scount.get();
        const Shape dims = reduced_dims(x_), per_channel = channel_shape(x_);
        const Tensor dy = gy.to(acc);
        const Tensor x_hat = mul(sub(x_.to(acc), smean.get().reshape(per_channel)), invstd.reshape(per_channel));
        // This rank's sums: the weight's and bias's gradients (DDP averages them over the ranks).
        const Tensor sum_dy = sum(dy, dims), sum_dy_x_hat = sum(mul(dy, x_hat), dims);
        Tensor dx, dw, db;
        if (need_w) dw = sum_dy_x_hat.to(wdtype);
        if (need_b) db = sum_dy.to(bdtype);
        if (need_x) {
          // The input's gradient reads both sums over every rank's batch.
          const int64_t channels = x_.size(1);
          Tensor sums = cat({sum_dy, sum_dy_x_hat}, 0).contiguous();
          all_reduce_sum(sums);
          const Tensor mean_dy = div(sums.narrow(0, 0, channels), n).reshape(per_channel);
          const Tensor mean_dy_x_hat = div(sums.narrow(0, channels, channels), n).reshape(per_channel);
          Tensor scale = invstd.reshape(per_channel);
          if (w_.defined()) scale = mul(scale, w_.to(acc).reshape(per_channel));
          dx = mul(sub(sub(dy, mean_dy), mul(x_hat, mean_dy_x_hat)), scale).to(x_.dtype());
        }
        return std::vector<Tensor>{dx, dw, db};
      });
}

}  // namespace mt
