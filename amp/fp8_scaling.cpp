#include "amp/fp8_scaling.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "kernels/fp8/fp8.h"

namespace mt::amp {

DelayedScaling::DelayedScaling(fp8::Format format, DelayedScalingOptions options, Device device)
    : format_(format), options_(options) {
  MT_CHECK(options.history_len >= 1 && options.history_len <= (int64_t{1} << 20),
           "DelayedScaling: history_len must be from 1 to 2^20, got {}", options.history_len);
  MT_CHECK(options.margin >= 0 && options.margin <= 64, "DelayedScaling: margin must be from 0 to 64, got {}",
           options.margin);
  history_ = zeros({options.history_len}, kF32, device);
  scale_ = ones({}, kF32, device);  // Transformer Engine starts every scale at 1
  scale_inv_ = ones({}, kF32, device);
  for (const Tensor* t : {&history_, &scale_, &scale_inv_}) tag_memory(*t, MemoryCategory::Fp8State);
}

fp8::Fp8Tensor DelayedScaling::quantize(const Tensor& x, bool with_transpose) {
  return fp8::quantize_with_scale(x, format_, scale_, newest_amax().view({}), with_transpose);
}

void DelayedScaling::load(const Tensor& amax_history, const Tensor& scale, const std::string& what) {
  MT_CHECK(amax_history.dtype() == kF32 && amax_history.dim() == 1 && amax_history.numel() == history_.numel(),
           "{}: the amax history must be f32 [{}] (--fp8-history), got {} {}", what, history_.numel(),
           amax_history.dtype(), amax_history.shape_string());
  MT_CHECK(scale.dtype() == kF32 && scale.numel() == 1, "{}: the scale must be one f32 value", what);
  for (double a : amax_history.to_vector()) {
    MT_CHECK(a >= 0, "{}: the amax history holds {}, expected amaxes >= 0", what, a);  // NaN fails too
  }
  const double s = scale.to_vector()[0];
  MT_CHECK(std::isfinite(s) && s > 0, "{}: the scale is {}, expected a positive finite scale", what, s);
  NoGradGuard no_grad;
  copy_(history_, amax_history.to(history_.device()));
  copy_(scale_, scale.reshape({}).to(scale_.device()));
  kernels::unary(kernels::UnaryOp::Reciprocal, scale_, scale_inv_);
}

void DelayedScaling::update() {
  NoGradGuard no_grad;
  const kernels::Fp8ScaleRule rule{fp8::max_finite(format_), std::ldexp(1.0f, -options_.margin)};
  kernels::fp8_delayed_update(history_, options_.algo == AmaxAlgo::MostRecent, rule, scale_, scale_inv_);
}

}  // namespace mt::amp
