// Fused optimizer kernels over lists of parameters (one call per dtype group).
//
// Each slot is one parameter with its gradient (any floating dtype), an
// optional f32 master copy, and its state: f32, BF16 or block-wise 8-bit
// (kernels/optim/state_format.h). The kernel reads found_inf and
// inv_scale itself: on inf/NaN it returns without touching anything, so the
// skip decision never leaves the device. The step counter lives in a device
// tensor and only advances on steps that ran.
#pragma once

#include <vector>

#include "kernels/optim/cpu.h"
#include "kernels/optim/math.h"
#include "kernels/optim/api.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::kernels {

namespace detail {

inline float* f32_pointer(const Tensor& t, const char* what) {
  if (!t.defined()) return nullptr;
  MT_CHECK(t.dtype() == kF32, "fused optimizer: {} must be f32, got {}", what, t.dtype());
  return static_cast<float*>(t.data_ptr());
}

// Optimizer state is stored as its format says: f32 (or, pure low precision
// with no master, the parameter's dtype), bf16, or u8 codes.
inline void* state_pointer(const Tensor& t, const ParamSlot& s) {
  if (!t.defined()) return nullptr;
  switch (s.state_format) {
    case StateFormat::Int8Blockwise:
      MT_CHECK(t.dtype() == kU8, "fused optimizer: 8-bit state must be u8 codes, got {}", t.dtype());
      break;
    case StateFormat::Bf16Stochastic:
      MT_CHECK(t.dtype() == kBF16, "fused optimizer: bf16 state must be bf16, got {}", t.dtype());
      break;
    case StateFormat::Plain:
      MT_CHECK(t.dtype() == kF32 || (!s.master.defined() && t.dtype() == s.param.dtype()),
               "fused optimizer: optimizer state must be f32 or the parameter's dtype, got {}", t.dtype());
      break;
  }
  return t.data_ptr();
}

// Int8Blockwise's absmax: f32, one per block of the state.
inline float* absmax_pointer(const Tensor& absmax, const ParamSlot& s) {
  if (s.state_format != StateFormat::Int8Blockwise || !s.state1.defined()) return nullptr;
  MT_CHECK(s.state_block >= kMinStateBlock && s.state_block <= kMaxStateBlock &&
               (s.state_block & (s.state_block - 1)) == 0,
           "fused optimizer: 8-bit state blocks must be a power of two from {} to {}, got {}", kMinStateBlock,
           kMaxStateBlock, s.state_block);
  const int64_t blocks = (s.param.numel() + s.state_block - 1) / s.state_block;
  MT_CHECK(absmax.defined() && absmax.dtype() == kF32 && absmax.numel() == blocks && absmax.is_contiguous(),
           "fused optimizer: 8-bit state of {} values in blocks of {} needs {} f32 absmax values", s.param.numel(),
           s.state_block, blocks);
  return static_cast<float*>(absmax.data_ptr());
}

// The code table an 8-bit slot carries (dynamic_codes() on its device), or
// null when no slot is 8-bit.
inline const float* device_codes(const std::vector<ParamSlot>& slots) {
  for (const ParamSlot& s : slots) {
    if (s.state_format != StateFormat::Int8Blockwise || !s.state1.defined()) continue;
    MT_CHECK(s.codes.defined() && s.codes.dtype() == kF32 && s.codes.numel() == 2 * kCodeEntries &&
                 s.codes.device() == s.param.device(),
             "fused optimizer: an 8-bit slot needs the {} code values on its device", 2 * kCodeEntries);
    return static_cast<const float*>(s.codes.data_ptr());
  }
  return nullptr;
}

// The slots as the multi-tensor kernels see them (contiguous, f32 state),
// with each slot's first Philox block for stochastic rounding.
struct DeviceSlots {
  ContiguousStaging staging;
  std::vector<OptimSlotRef> refs;
  DeviceSlots(const std::vector<ParamSlot>& slots, const StochasticRounding& rounding) {
    for (const ParamSlot& s : slots) {
      MT_CHECK(s.param.numel() == s.grad.numel(), "fused optimizer: parameter {} and gradient {} differ in size",
               s.param.shape_string(), s.grad.shape_string());
      for (const Tensor* t : {&s.grad, &s.master, &s.state1, &s.state2, &s.absmax1, &s.absmax2, &s.step}) {
        MT_CHECK(!t->defined() || t->device() == s.param.device(),
                 "fused optimizer: a parameter on {} has state or a gradient on {} (the kernel reads them there)",
                 s.param.device(), t->device());
      }
      OptimSlotRef r;
      const Tensor param = staging.stage(s.param, true);
      r.param = param.data_ptr();
      r.param_dtype = param.dtype();
      const Tensor grad = staging.stage(s.grad, false);
      r.grad = grad.data_ptr();
      r.grad_dtype = grad.dtype();
      r.master = f32_pointer(staging.stage(s.master, true), "the master copy");
      r.state1 = state_pointer(staging.stage(s.state1, true), s);
      r.state2 = state_pointer(staging.stage(s.state2, true), s);
      r.state_dtype = s.state1.defined() ? s.state1.dtype() : kF32;
      r.state_format = s.state_format;
      r.state_block = static_cast<std::int32_t>(s.state_block);
      r.absmax1 = absmax_pointer(s.absmax1, s);
      r.absmax2 = s.state2.defined() ? absmax_pointer(s.absmax2, s) : nullptr;
      r.rounding_key = s.rounding_key;
      r.step = f32_pointer(s.step, "the step counter");
      r.numel = s.param.numel();
      r.stochastic_bf16 = rounding.enabled && s.master.defined() && s.param.dtype() == kBF16;
      refs.push_back(r);
    }
  }
  void finish(const std::vector<ParamSlot>& slots) {
    staging.write_back();
    for (const ParamSlot& s : slots) {
      mark_written(s.param);
      mark_written(s.master);
      mark_written(s.state1);
      mark_written(s.state2);
      mark_written(s.step);
      mark_written(s.absmax1);
      mark_written(s.absmax2);
    }
  }
};

inline const float* optional_f32(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr;
}
inline const double* optional_f64(const Tensor& t) {
  if (!t.defined()) return nullptr;
  MT_CHECK(t.dtype() == kF64 && t.numel() == 1, "fused optimizer: lr_factor must be an f64 scalar, got {} {}",
           t.dtype(), t.shape_string());
  return static_cast<const double*>(t.data_ptr());
}

inline std::vector<TensorRef> flat_refs(const std::vector<Tensor>& tensors, ContiguousStaging& staging, bool written) {
  std::vector<TensorRef> refs;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) refs.push_back(tensor_ref(staging.stage(t, written)));
  }
  return refs;
}

}  // namespace detail

// Each slot's step counter is incremented before its update, unless the step is skipped.
inline void adamw_step(const std::vector<ParamSlot>& slots, const AdamWArgs& args, const AmpControl& amp,
                       const StochasticRounding& rounding = {}) {
  if (slots.empty()) return;
  const Backend backend = backend_for(slots.front().param.device(), "adamw_step");
  if (backend == Backend::Cpu) return cpu::adamw_step(slots, args, amp, rounding);
  detail::DeviceSlots device_slots(slots, rounding);
  for (const OptimSlotRef& r : device_slots.refs) {
    MT_CHECK(r.state1 != nullptr && r.state2 != nullptr, "adamw_step: every parameter needs exp_avg and exp_avg_sq");
  }
  const auto& refs = device_slots.refs;
  const auto count = static_cast<int>(refs.size());
  const float* inv_scale = detail::optional_f32(amp.inv_scale);
  const float* found_inf = detail::optional_f32(amp.found_inf);
  const double* lr_factor = detail::optional_f64(amp.lr_factor);
  const Stream stream = launch_stream(slots.front().param.device());
  const float* codes = detail::device_codes(slots);
  MT_DEVICE_CALL(backend, adamw_step, refs.data(), count, args, inv_scale, found_inf, lr_factor, codes, stream);
  device_slots.finish(slots);
}
inline void sgd_step(const std::vector<ParamSlot>& slots, const SgdArgs& args, const AmpControl& amp,
                     const StochasticRounding& rounding = {}) {
  if (slots.empty()) return;
  const Backend backend = backend_for(slots.front().param.device(), "sgd_step");
  if (backend == Backend::Cpu) return cpu::sgd_step(slots, args, amp, rounding);
  detail::DeviceSlots device_slots(slots, rounding);
  const auto& refs = device_slots.refs;
  const auto count = static_cast<int>(refs.size());
  const float* inv_scale = detail::optional_f32(amp.inv_scale);
  const float* found_inf = detail::optional_f32(amp.found_inf);
  const double* lr_factor = detail::optional_f64(amp.lr_factor);
  const Stream stream = launch_stream(slots.front().param.device());
  const float* codes = detail::device_codes(slots);
  MT_DEVICE_CALL(backend, sgd_step, refs.data(), count, args, inv_scale, found_inf, lr_factor, codes, stream);
  device_slots.finish(slots);
}
// The device-side LR schedule: unless found_inf (f32 [1], optional) is
// non-zero, step_count (i64 [1]) += 1; then factor (f64 [1]) = the schedule's
// multiplier at step_count. On the device: no host read, capturable.
inline void advance_lr_schedule(const LrSchedule& schedule, const Tensor& step_count, const Tensor& found_inf,
                                const Tensor& factor) {
  MT_CHECK(step_count.dtype() == kI64 && step_count.numel() == 1 && factor.dtype() == kF64 && factor.numel() == 1,
           "advance_lr_schedule: expected an i64 step count and an f64 factor, got {} and {}", step_count.dtype(),
           factor.dtype());
  const Backend backend = backend_for(factor.device(), "advance_lr_schedule");
  if (backend == Backend::Cpu) return cpu::advance_lr_schedule(schedule, step_count, found_inf, factor);
  auto* count = static_cast<long long*>(step_count.data_ptr());
  const float* inf = detail::optional_f32(found_inf);
  auto* out = static_cast<double*>(factor.data_ptr());
  const Stream stream = launch_stream(factor.device());
  MT_DEVICE_CALL(backend, advance_lr_schedule, schedule, count, inf, out, stream);
  mark_written(step_count);
  mark_written(factor);
}
// out (f32 [1]) = sum over all tensors of x^2, accumulated in f32 (f64 on the CPU).
inline void sum_of_squares(const std::vector<Tensor>& tensors, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "sum_of_squares");
  if (backend == Backend::Cpu) return cpu::sum_of_squares(tensors, out);
  MT_CHECK(out.dtype() == kF32 && out.numel() == 1, "sum_of_squares: out must be an f32 scalar");
  ContiguousStaging staging;
  const std::vector<TensorRef> refs = detail::flat_refs(tensors, staging, false);
  int64_t chunks = 0;
  for (const TensorRef& r : refs) chunks += (r.numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
  const Tensor partials = empty({std::max<int64_t>(chunks, 1)}, kF32, out.device());
  auto* partial_ptr = static_cast<float*>(partials.data_ptr());
  auto* out_ptr = static_cast<float*>(out.data_ptr());
  MT_DEVICE_CALL(backend, sum_of_squares, refs.data(), static_cast<int>(refs.size()), partial_ptr, out_ptr,
                 launch_stream(out.device()));
  mark_written(out);
}
// x *= min(1, max_norm / (total_norm + 1e-6)) for every tensor, computed on the device.
inline void scale_by_clip_coefficient(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) {
  const Backend backend = backend_for(total_norm.device(), "scale_by_clip_coefficient");
  if (backend == Backend::Cpu) return cpu::scale_by_clip_coefficient(tensors, total_norm, max_norm);
  MT_CHECK(total_norm.dtype() == kF32, "scale_by_clip_coefficient: total_norm must be f32");
  ContiguousStaging staging;
  const std::vector<TensorRef> refs = detail::flat_refs(tensors, staging, true);
  const auto* norm = static_cast<const float*>(total_norm.data_ptr());
  MT_DEVICE_CALL(backend, scale_by_clip_coefficient, refs.data(), static_cast<int>(refs.size()), norm, max_norm,
                 launch_stream(total_norm.device()));
  staging.write_back();
  for (const Tensor& t : tensors) mark_written(t);
}

}  // namespace mt::kernels
