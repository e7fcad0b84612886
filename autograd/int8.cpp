#include "autograd/int8.h"

#include <cmath>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "kernels/conv/int8.h"
#include "kernels/gemm/int8.h"
#include "kernels/quantize/math.h"
#include "kernels/quantize/quantize.h"

namespace mt::int8 {
namespace {

// The [channels, inner] view of x around its channel axis (-1: one channel).
kernels::QuantizeAxis axis_of(const Tensor& x, int64_t axis) {
  if (axis < 0) return {.channels = 1, .inner = std::max<int64_t>(x.numel(), 1)};
  MT_CHECK(axis < x.dim(), "int8: channel axis {} of a {}-d tensor", axis, x.dim());
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  return {.channels = x.size(axis), .inner = std::max<int64_t>(inner, 1)};
}

int64_t channel_count(const Tensor& x, int64_t axis) { return axis < 0 ? 1 : x.size(axis); }

void refuse_grad(const Tensor& x, const char* op) {
  MT_CHECK(!(GradMode::is_enabled() && x.requires_grad()),
           "{}: INT8 is for inference and records nothing on the tape; run it under NoGradGuard or on a tensor "
           "that does not require grad",
           op);
}

// check() without reading the values: dtypes, counts and devices.
void check_layout(const Int8Tensor& q, const std::string& what) {
  MT_CHECK(q.data.defined() && (q.data.dtype() == kI8 || q.data.dtype() == kU8),
           "{}: INT8 data must be i8 or u8, got {}", what, q.data.defined() ? q.data.dtype() : kF32);
  MT_CHECK(q.axis >= -1 && q.axis < std::max<int64_t>(q.data.dim(), 1), "{}: channel axis {} of a {}-d tensor", what,
           q.axis, q.data.dim());
  const int64_t channels = channel_count(q.data, q.axis);
  MT_CHECK(q.scales.defined() && q.scales.dtype() == kF32 && q.scales.numel() == channels,
           "{}: expected {} f32 scale(s), got {}", what, channels,
           q.scales.defined() ? fmt::format("{} {}", q.scales.dtype(), q.scales.shape_string()) : "none");
  MT_CHECK(
      q.zero_points.defined() && q.zero_points.dtype() == kI32 && q.zero_points.numel() == channels,
      "{}: expected {} i32 zero point(s), got {}", what, channels,
      q.zero_points.defined() ? fmt::format("{} {}", q.zero_points.dtype(), q.zero_points.shape_string()) : "none");
  MT_CHECK(q.scales.device() == q.data.device() && q.zero_points.device() == q.data.device(),
           "{}: scales and zero points must be on the data's device {}", what, q.data.device());
}

}  // namespace

void check(const Int8Tensor& q, const std::string& what) {
  check_layout(q, what);
  // One host read: a checkpoint's scales are validated once, when loaded.
  const std::vector<double> scales = q.scales.to_vector();
  for (size_t c = 0; c < scales.size(); ++c) {
    MT_CHECK(std::isfinite(scales[c]) && scales[c] > 0, "{}: scale {} of channel {} is not a finite positive number",
             what, scales[c], c);
  }
  const int32_t lo = kernels::quantized_min(q.data.dtype()), hi = kernels::quantized_max(q.data.dtype());
  const std::vector<double> zero_points = q.zero_points.to_vector();
  for (size_t c = 0; c < zero_points.size(); ++c) {
    MT_CHECK(zero_points[c] >= lo && zero_points[c] <= hi, "{}: zero point {} of channel {} is outside {}'s [{}, {}]",
             what, zero_points[c], c, q.data.dtype(), lo, hi);
  }
}

namespace {

// quantize(), with the scales' and zero points' values checked (a host read
// of each) unless the caller has checked them already.
Int8Tensor quantize_values(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis, DType dtype,
                           bool values_checked) {
  refuse_grad(x, "int8::quantize");
  MT_CHECK(dtype == kI8 || dtype == kU8, "int8::quantize: quantizes into i8 or u8, got {}", dtype);
  MT_CHECK(is_compute_float(x.dtype()), "int8::quantize: quantizes floating data, got {}", x.dtype());
  const int64_t channels = channel_count(x, axis);
  // One value per channel, whatever their shape ([] for one); check() names a wrong count.
  auto per_channel = [&](const Tensor& t) {
    return t.defined() && t.numel() == channels ? t.contiguous().reshape({channels}) : t;
  };
  Int8Tensor q{.data = empty(x.sizes(), dtype, x.device()),
               .scales = per_channel(scales),
               .zero_points = per_channel(zero_points),
               .axis = axis};
  if (values_checked) {
    check_layout(q, "int8::quantize");
  } else {
    check(q, "int8::quantize");
  }
  kernels::int8_quantize(x.contiguous(), q.scales, q.zero_points, axis_of(x, axis), q.data);
  return q;
}

}  // namespace

Int8Tensor quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis, DType dtype) {
  return quantize_values(x, scales, zero_points, axis, dtype, /*values_checked=*/false);
}

Int8Tensor quantize_per_tensor(const Tensor& x, double scale, int32_t zero_point, DType dtype) {
  return quantize(x, full({1}, scale, kF32, x.device()), full({1}, zero_point, kI32, x.device()), -1, dtype);
}

Int8Tensor quantize_per_channel_symmetric(const Tensor& weight) {
  refuse_grad(weight, "int8::quantize_per_channel_symmetric");
  MT_CHECK(weight.dim() >= 1 && weight.size(0) >= 1, "int8: a per-channel weight needs an output axis, got {}",
           weight.shape_string());
  Tensor scales;
  {
    const NoGradGuard no_grad;
    const Tensor rows = weight.to(kF32).reshape({weight.size(0), -1});
    const Tensor amax = max(rows.abs(), 1).values;
    // An all-zero row gets scale 1 (every value maps to 0 exactly), not 0/127.
    scales = where(eq(amax, 0.0), full_like(amax, 127.0), amax) / 127.0;
  }
  return quantize(weight, scales, zeros({weight.size(0)}, kI32, weight.device()), 0, kI8);
}

Tensor dequantize(const Int8Tensor& q, DType dtype) {
  check(q, "int8::dequantize");
  MT_CHECK(is_compute_float(dtype), "int8::dequantize: dequantizes into a floating dtype, got {}", dtype);
  Tensor out = empty(q.data.sizes(), dtype, q.data.device());
  kernels::int8_dequantize(q.data.contiguous(), q.scales.contiguous(), q.zero_points.contiguous(),
                           axis_of(q.data, q.axis), out);
  return out;
}

namespace {

// x [m, k] as u8: per tensor, or per input channel (axis 1) under SmoothQuant.
Int8Tensor quantize_input(const Tensor& x, const InputQuantization& input) {
  const bool checked = input.zero_point_value.has_value();  // the caller checked the values
  if (!input.smooth.defined()) return quantize_values(x, input.scale, input.zero_point, -1, kU8, checked);
  const int64_t k = x.size(1);
  MT_CHECK(input.smooth.numel() == k, "int8::linear: {} smoothing factors for {} input channels", input.smooth.numel(),
           k);
  const Tensor scales = input.scale.to(kF32).reshape({1}) * input.smooth.to(kF32).reshape({k});
  const Tensor zero_points = input.zero_point.reshape({1}).expand({k});
  return quantize_values(x, scales, zero_points, 1, kU8, checked);
}

// x as the INT8 kernels read it: a u8 x is quantized already (the layer
// before requantized it with this layer's input scale and zero point).
Tensor quantized_input(const Tensor& x, const InputQuantization& input, const char* what) {
  if (x.dtype() != kU8) return quantize_input(x, input).data;
  MT_CHECK(!input.smooth.defined(),
           "{}: a u8 input is quantized per tensor already; a SmoothQuant layer quantizes its float input per channel",
           what);
  return x.contiguous();
}

// The kernels' form of a requantization: the output dtype, the activation
// before it (ReLU when the chain has one), its scale and zero point.
struct OutputPlan {
  DType dtype;
  kernels::GemmActivation activation;
  float scale = 0;
  int32_t zero_point = 0;
};

OutputPlan output_plan(const Tensor& x, kernels::GemmActivation activation,
                       const std::optional<Requantization>& requantize, const char* what) {
  const DType float_dtype = x.dtype() == kBF16 ? kBF16 : kF32;
  if (!requantize) return {float_dtype, activation};
  MT_CHECK(x.device() == kCPU, "{}: requantizing its output is the CPU's only (input on {})", what, x.device());
  MT_CHECK(
      !requantize->relu || activation == kernels::GemmActivation::None || activation == kernels::GemmActivation::Relu,
      "{}: a ReLU before requantizing cannot follow another activation", what);
  return {kU8, requantize->relu ? kernels::GemmActivation::Relu : activation, static_cast<float>(requantize->scale),
          requantize->zero_point};
}

// The u8 zero point by value: the caller's, else read from the device.
int32_t zero_point_of(const InputQuantization& input) {
  return input.zero_point_value ? *input.zero_point_value : static_cast<int32_t>(input.zero_point.item<double>());
}

}  // namespace

Tensor linear(const Tensor& x, const Int8Tensor& weight, const InputQuantization& input, const Tensor& bias,
              LinearActivation activation, const std::optional<Requantization>& requantize) {
  refuse_grad(x, "int8::linear");
  MT_CHECK(weight.data.dtype() == kI8 && weight.data.dim() == 2 && weight.axis == 0,
           "int8::linear: the weight must be i8 [out, in] quantized per output channel (axis 0)");
  MT_CHECK(x.dim() >= 1 && x.size(-1) == weight.data.size(1), "int8::linear: input {} against weight [{}, {}]",
           x.shape_string(), weight.data.size(0), weight.data.size(1));
  MT_CHECK(weight.data.device() == x.device() && weight.zero_points.device() == x.device(),
           "int8::linear: the weight is on {} and the input on {}", weight.data.device(), x.device());
  const NoGradGuard no_grad;
  const int64_t k = x.size(-1), n = weight.data.size(0), m = k == 0 ? 0 : x.numel() / k;
  const Tensor a = quantized_input(x.reshape({m, k}), input, "int8::linear");
  const OutputPlan plan = output_plan(x, autograd::gemm_activation(activation), requantize, "int8::linear");
  // The epilogue's scale per output channel: the input's times the weight's.
  const Tensor scales = (input.scale.to(kF32).reshape({1}) * weight.scales).contiguous();
  const Tensor bias32 = bias.defined() ? bias.to(kF32).contiguous() : Tensor();
  MT_CHECK(!bias.defined() || bias32.numel() == n, "int8::linear: bias has {} values for {} outputs", bias.numel(), n);
  Tensor out = empty({m, n}, plan.dtype, x.device());
  const Tensor w = weight.data.contiguous();
  const kernels::Int8Gemm gemm{.m = m,
                               .n = n,
                               .k = k,
                               .a = static_cast<const uint8_t*>(a.data_ptr()),
                               .a_zero_point = zero_point_of(input),
                               .b = static_cast<const int8_t*>(w.data_ptr()),
                               .scales = static_cast<const float*>(scales.data_ptr()),
                               .bias = bias32.defined() ? static_cast<const float*>(bias32.data_ptr()) : nullptr,
                               .activation = plan.activation,
                               .out_scale = plan.scale,
                               .out_zero_point = plan.zero_point};
  kernels::int8_gemm(gemm, out);
  Shape shape = x.sizes();
  shape.back() = n;
  return out.reshape(shape);
}

Tensor conv2d(const Tensor& x, const Int8Tensor& weight, const InputQuantization& input, const Tensor& bias,
              Size2 stride, Size2 padding, Size2 dilation, const std::optional<Requantization>& requantize) {
  refuse_grad(x, "int8::conv2d");
  MT_CHECK(weight.data.dtype() == kI8 && weight.data.dim() == 4 && weight.axis == 0,
           "int8::conv2d: the weight must be i8 [out, in, kH, kW] quantized per output channel (axis 0)");
  MT_CHECK(!input.smooth.defined(), "int8::conv2d: SmoothQuant applies to Linear layers");
  const kernels::ConvShape g = autograd::conv2d_geometry(x, weight.data.sizes(), stride, padding, dilation, 1);
  const NoGradGuard no_grad;
  const Tensor a = quantized_input(x, input, "int8::conv2d");
  const OutputPlan plan = output_plan(x, kernels::GemmActivation::None, requantize, "int8::conv2d");
  const Tensor scales = (input.scale.to(kF32).reshape({1}) * weight.scales).contiguous();
  const Tensor bias32 = bias.defined() ? bias.to(kF32).contiguous() : Tensor();
  MT_CHECK(!bias.defined() || bias32.numel() == g.out_channels, "int8::conv2d: bias has {} values for {} channels",
           bias.numel(), g.out_channels);
  Tensor y = empty({g.batch, g.out_channels, g.out_h, g.out_w}, plan.dtype, x.device());
  const Tensor w = weight.data.contiguous();
  kernels::int8_conv2d({.shape = g,
                        .x = static_cast<const uint8_t*>(a.data_ptr()),
                        .x_zero_point = zero_point_of(input),
                        .weight = static_cast<const int8_t*>(w.data_ptr()),
                        .scales = static_cast<const float*>(scales.data_ptr()),
                        .bias = bias32.defined() ? static_cast<const float*>(bias32.data_ptr()) : nullptr,
                        .activation = plan.activation,
                        .out_scale = plan.scale,
                        .out_zero_point = plan.zero_point},
                       y);
  return y;
}

}  // namespace mt::int8
