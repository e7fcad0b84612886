// AMP kernels: the fused inf-check/unscale over many tensors and the
// one-thread loss-scale update. Both read and write only device tensors
// (scale, inv_scale, found_inf, growth_tracker), so a training step never
// needs the host to look at a value.
#pragma once

#include <vector>

#include "kernels/amp/cpu.h"
#include "kernels/amp/api.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::kernels {

// For every element of every tensor: found_inf = 1 if it is inf or NaN, then
// x *= inv_scale (an undefined inv_scale only checks). One launch for the list.
// per_tensor (optional, f32 [tensors.size()], zeroed by the caller, every
// tensor defined): entry i is set to 1 when tensors[i] held an inf or NaN.
inline void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf, const Tensor& inv_scale,
                                  const Tensor& per_tensor = Tensor()) {
  MT_CHECK(!per_tensor.defined() || (per_tensor.dtype() == kF32 && per_tensor.is_contiguous() &&
                                     per_tensor.numel() == static_cast<int64_t>(tensors.size()) &&
                                     per_tensor.device() == found_inf.device()),
           "unscale_and_check_inf: per_tensor must be a contiguous f32 [{}] on {}", tensors.size(), found_inf.device());
  const Backend backend = backend_for(found_inf.device(), "unscale_and_check_inf");
  if (backend == Backend::Cpu) return cpu::unscale_and_check_inf(tensors, found_inf, inv_scale, per_tensor);
  MT_CHECK(found_inf.dtype() == kF32 && (!inv_scale.defined() || inv_scale.dtype() == kF32),
           "unscale_and_check_inf: found_inf and inv_scale must be f32");
  ContiguousStaging staging;
  std::vector<TensorRef> refs;
  for (const Tensor& t : tensors) {
    // With per_tensor every tensor keeps its slot (an empty one never sets its flag).
    MT_CHECK(t.defined() || !per_tensor.defined(), "unscale_and_check_inf: per_tensor needs every tensor defined");
    if (!t.defined() || (t.numel() == 0 && !per_tensor.defined())) continue;
    MT_CHECK(t.device() == found_inf.device(), "unscale_and_check_inf: a gradient is on {} but found_inf is on {}",
             t.device(), found_inf.device());
    refs.push_back(tensor_ref(staging.stage(t, inv_scale.defined())));
  }
  auto* flag = static_cast<float*>(found_inf.data_ptr());
  const auto* factor = inv_scale.defined() ? static_cast<const float*>(inv_scale.data_ptr()) : nullptr;
  auto* flags = per_tensor.defined() ? static_cast<float*>(per_tensor.data_ptr()) : nullptr;
  MT_DEVICE_CALL(backend, unscale_and_check_inf, refs.data(), static_cast<int>(refs.size()), flag, factor, flags,
                 launch_stream(found_inf.device()));
  staging.write_back();
  for (const Tensor& t : tensors) mark_written(t);
  mark_written(found_inf);
  if (per_tensor.defined()) mark_written(per_tensor);
}

// PyTorch's update rule: on inf, scale *= backoff and the tracker resets;
// otherwise the tracker counts clean steps and at growth_interval the scale
// grows (unless that would overflow to inf) and the tracker resets.
inline void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                         ScaleUpdateArgs args) {
  const Backend backend = backend_for(scale.device(), "update_scale");
  if (backend == Backend::Cpu) return cpu::update_scale(scale, growth_tracker, found_inf, args);
  MT_CHECK(scale.dtype() == kF32 && growth_tracker.dtype() == kI32 && found_inf.dtype() == kF32,
           "update_scale: expected f32 scale, i32 growth_tracker and f32 found_inf, got {}, {}, {}", scale.dtype(),
           growth_tracker.dtype(), found_inf.dtype());
  auto* s = static_cast<float*>(scale.data_ptr());
  auto* tracker = static_cast<int32_t*>(growth_tracker.data_ptr());
  const auto* flag = static_cast<const float*>(found_inf.data_ptr());
  MT_DEVICE_CALL(backend, update_scale, s, tracker, flag, args.growth_factor, args.backoff_factor, args.growth_interval,
                 args.min_scale, args.max_scale, launch_stream(scale.device()));
  mark_written(scale);
  mark_written(growth_tracker);
}

}  // namespace mt::kernels
