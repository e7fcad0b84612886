// FP8 quantization, dispatched: the CPU back end or the CUDA/sim kernels.
// Op code (autograd/fp8.cpp) calls these with contiguous tensors; amax,
// scale and scale_inv are f32 tensors on the data's device, written by
// kernels only (no host sync anywhere here).
#pragma once

#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/fp8/api.h"
#include "kernels/fp8/cpu.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

namespace detail {
inline void check_fp8_operands(const char* op, const Tensor& x, const Tensor& q) {
  MT_CHECK(x.is_contiguous() && q.is_contiguous(), "{}: expected contiguous tensors", op);
  MT_CHECK(x.device() == q.device(), "{}: input on {} but output on {}", op, x.device(), q.device());
  MT_CHECK(x.numel() == q.numel(), "{}: input has {} elements, output {}", op, x.numel(), q.numel());
}
inline void check_f32_scalar(const char* op, const char* what, const Tensor& t, Device device) {
  MT_CHECK(t.defined() && t.dtype() == kF32 && t.numel() == 1 && t.device() == device,
           "{}: {} must be one f32 value on {}", op, what, device);
}
// The FP8 kernels run on a GPU only once they have passed their check there
// (kernels/verify/trust.h). There is no other FP8 path on a GPU, so an
// unverified one is an error, never numbers nobody has checked.
inline void require_fp8_verified(Device device) {
  MT_CHECK(verify::own_family_trusted(verify::OwnFamily::Fp8, device),
           "FP8: mixtape's FP8 kernels (kernels/fp8) have not passed their check on {} (they have run on the "
           "simulator only): run `mixtape info --verify --device {}`, or train FP8 on the CPU",
           device, device);
}
}  // namespace detail

// amax = max |x| (NaN if x holds one).
inline void fp8_amax(const Tensor& x, const Tensor& amax) {
  detail::check_f32_scalar("fp8_amax", "amax", amax, x.device());
  MT_CHECK(x.is_contiguous(), "fp8_amax: expected a contiguous tensor");
  fill(amax, 0.0);
  const Backend backend = backend_for(x.device(), "fp8_amax");
  if (backend == Backend::Cpu) return cpu::fp8_amax(x, amax);
  detail::require_fp8_verified(x.device());
  MT_DEVICE_CALL(backend, fp8_amax, tensor_ref(x), static_cast<float*>(amax.data_ptr()), launch_stream(x.device()));
  mark_written(amax);
}

// Delayed scaling's step for one tensor (kernels/fp8/math.h: fp8_delayed_step).
inline void fp8_delayed_update(const Tensor& history, bool most_recent, Fp8ScaleRule rule, const Tensor& scale,
                               const Tensor& scale_inv) {
  MT_CHECK(history.dtype() == kF32 && history.dim() == 1 && history.numel() >= 1 && history.is_contiguous() &&
               history.device() == scale.device(),
           "fp8_delayed_update: the amax history must be a contiguous f32 [length >= 1] on {}", scale.device());
  detail::check_f32_scalar("fp8_delayed_update", "scale", scale, scale.device());
  detail::check_f32_scalar("fp8_delayed_update", "scale_inv", scale_inv, scale.device());
  const Backend backend = backend_for(scale.device(), "fp8_delayed_update");
  if (backend == Backend::Cpu) return cpu::fp8_delayed_update(history, most_recent, rule, scale, scale_inv);
  detail::require_fp8_verified(scale.device());
  MT_DEVICE_CALL(backend, fp8_delayed_update, static_cast<float*>(history.data_ptr()), history.numel(), most_recent,
                 rule, static_cast<float*>(scale.data_ptr()), static_cast<float*>(scale_inv.data_ptr()),
                 launch_stream(scale.device()));
  mark_written(history);
  mark_written(scale);
  mark_written(scale_inv);
}

// out = fp8(x * scale) in out's FP8 dtype; amax (optional) = max(amax, max |x| of this pass): a running max.
// With out_t (x 2-D [R, C], out_t [C, R] contiguous) the same pass writes out's transpose.
inline void fp8_quantize_with_scale(const Tensor& x, const Tensor& scale, const Tensor& out,
                                    const Tensor& amax = Tensor(), const Tensor& out_t = Tensor()) {
  detail::check_fp8_operands("fp8_quantize", x, out);
  detail::check_f32_scalar("fp8_quantize", "scale", scale, x.device());
  if (amax.defined()) detail::check_f32_scalar("fp8_quantize", "amax", amax, x.device());
  if (out_t.defined()) {
    MT_CHECK(x.dim() == 2 && out_t.dim() == 2 && out_t.size(0) == x.size(1) && out_t.size(1) == x.size(0) &&
                 out_t.is_contiguous() && out_t.dtype() == out.dtype() && out_t.device() == x.device(),
             "fp8_quantize: the transposed output must be a contiguous {} [{}, {}] on {}", out.dtype(),
             x.dim() == 2 ? x.size(1) : 0, x.dim() == 2 ? x.size(0) : 0, x.device());
  }
  const Backend backend = backend_for(x.device(), "fp8_quantize");
  if (backend == Backend::Cpu) return cpu::fp8_quantize_with_scale(x, scale, out, out_t, amax);
  detail::require_fp8_verified(x.device());
  MT_DEVICE_CALL(backend, fp8_quantize_with_scale, tensor_ref(x), static_cast<const float*>(scale.data_ptr()),
                 tensor_ref(out), tensor_ref(out_t), amax.defined() ? static_cast<float*>(amax.data_ptr()) : nullptr,
                 launch_stream(x.device()));
  mark_written(out);
  mark_written(out_t);
  mark_written(amax);
}

// Current scaling's per-tensor step: scale = rule(amax), scale_inv = 1 / scale (f32 scalars on one device).
inline void fp8_scale_from_amax(const Tensor& amax, Fp8ScaleRule rule, const Tensor& scale, const Tensor& scale_inv) {
  for (const Tensor* t : {&scale, &scale_inv})
    detail::check_f32_scalar("fp8_scale_from_amax", "scale", *t, amax.device());
  detail::check_f32_scalar("fp8_scale_from_amax", "amax", amax, amax.device());
  const Backend backend = backend_for(amax.device(), "fp8_scale_from_amax");
  if (backend == Backend::Cpu) return cpu::fp8_scale_from_amax(amax, rule, scale, scale_inv);
  detail::require_fp8_verified(amax.device());
  MT_DEVICE_CALL(backend, fp8_scale_from_amax, static_cast<const float*>(amax.data_ptr()), rule,
                 static_cast<float*>(scale.data_ptr()), static_cast<float*>(scale_inv.data_ptr()),
                 launch_stream(amax.device()));
  mark_written(scale);
  mark_written(scale_inv);
}

// Each group's own scale from its amax; scale_inv holds groups.count() f32 values.
inline void fp8_quantize_grouped(const Tensor& x, Fp8Groups groups, Fp8ScaleRule rule, const Tensor& out,
                                 const Tensor& scale_inv) {
  detail::check_fp8_operands("fp8_quantize", x, out);
  MT_CHECK(scale_inv.dtype() == kF32 && scale_inv.is_contiguous() && scale_inv.numel() == groups.count() &&
               scale_inv.device() == x.device(),
           "fp8_quantize: scale_inv must be {} contiguous f32 values on {}", groups.count(), x.device());
  const Backend backend = backend_for(x.device(), "fp8_quantize");
  if (backend == Backend::Cpu) return cpu::fp8_quantize_grouped(x, groups, rule, out, scale_inv);
  detail::require_fp8_verified(x.device());
  MT_DEVICE_CALL(backend, fp8_quantize_grouped, tensor_ref(x), groups, rule, tensor_ref(out),
                 static_cast<float*>(scale_inv.data_ptr()), launch_stream(x.device()));
  mark_written(out);
  mark_written(scale_inv);
}

// counts (f32 [2], running) += saturated and flushed-to-zero elements (x: what q was quantized from).
inline void fp8_count_saturated_and_flushed(const Tensor& q, const Tensor& x, const Tensor& scale_inv, Fp8Groups groups,
                                            const Tensor& counts) {
  detail::check_fp8_operands("fp8_count_saturated_and_flushed", x, q);
  MT_CHECK(is_fp8(q.dtype()) && counts.dtype() == kF32 && counts.numel() == 2 && counts.is_contiguous() &&
               counts.device() == q.device() && scale_inv.is_contiguous() && scale_inv.numel() == groups.count(),
           "fp8_count_saturated_and_flushed: expected FP8 data, its scales and an f32 [2] on {}", q.device());
  const Backend backend = backend_for(q.device(), "fp8_count_saturated_and_flushed");
  if (backend == Backend::Cpu) return cpu::fp8_count_saturated_and_flushed(q, x, scale_inv, groups, counts);
  detail::require_fp8_verified(q.device());
  MT_DEVICE_CALL(backend, fp8_count_saturated_and_flushed, tensor_ref(q), tensor_ref(x),
                 static_cast<const float*>(scale_inv.data_ptr()), groups, static_cast<float*>(counts.data_ptr()),
                 launch_stream(q.device()));
  mark_written(counts);
}

// out = value(q) * scale_inv[group], rounded once into out's dtype.
inline void fp8_dequantize(const Tensor& q, const Tensor& scale_inv, Fp8Groups groups, const Tensor& out) {
  detail::check_fp8_operands("fp8_dequantize", q, out);
  MT_CHECK(scale_inv.dtype() == kF32 && scale_inv.is_contiguous() && scale_inv.numel() == groups.count() &&
               scale_inv.device() == q.device(),
           "fp8_dequantize: scale_inv must be {} contiguous f32 values on {}", groups.count(), q.device());
  const Backend backend = backend_for(q.device(), "fp8_dequantize");
  if (backend == Backend::Cpu) return cpu::fp8_dequantize(q, scale_inv, groups, out);
  detail::require_fp8_verified(q.device());
  MT_DEVICE_CALL(backend, fp8_dequantize, tensor_ref(q), static_cast<const float*>(scale_inv.data_ptr()), groups,
                 tensor_ref(out), launch_stream(q.device()));
  mark_written(out);
}

// The FP8 GEMM's scaling step (api.h says the formula): product f32
// [k_groups, M, N], bias f32 [N] (or undefined), out [M, N] contiguous.
inline void fp8_gemm_combine(const Tensor& product, int64_t k_group, const Tensor& a_scale_inv, Fp8Groups a_groups,
                             const Tensor& b_scale_inv, Fp8Groups b_groups, const Tensor& bias, const Tensor& out) {
  MT_CHECK(product.dtype() == kF32 && product.is_contiguous() && product.dim() == 3 && out.dim() == 2 &&
               out.is_contiguous() && product.size(1) == out.size(0) && product.size(2) == out.size(1),
           "fp8_gemm_combine: product {} does not fit the output {}", product.shape_string(), out.shape_string());
  MT_CHECK(a_scale_inv.numel() == a_groups.count() && b_scale_inv.numel() == b_groups.count() &&
               a_scale_inv.dtype() == kF32 && b_scale_inv.dtype() == kF32 && a_scale_inv.is_contiguous() &&
               b_scale_inv.is_contiguous(),
           "fp8_gemm_combine: the scales do not match their groups");
  MT_CHECK(!bias.defined() || (bias.dtype() == kF32 && bias.is_contiguous() && bias.numel() == out.size(1)),
           "fp8_gemm_combine: bias must be f32 [{}]", out.size(1));
  const Backend backend = backend_for(out.device(), "fp8_gemm_combine");
  if (backend == Backend::Cpu) {
    return cpu::fp8_gemm_combine(product, k_group, a_scale_inv, a_groups, b_scale_inv, b_groups, bias, out);
  }
  detail::require_fp8_verified(out.device());
  MT_DEVICE_CALL(backend, fp8_gemm_combine, static_cast<const float*>(product.data_ptr()), product.size(0), k_group,
                 static_cast<const float*>(a_scale_inv.data_ptr()), a_groups,
                 static_cast<const float*>(b_scale_inv.data_ptr()), b_groups,
                 bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr, tensor_ref(out),
                 launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
