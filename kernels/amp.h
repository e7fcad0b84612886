// AMP kernels: the fused inf-check/unscale over many tensors and the
// one-thread loss-scale update. Both read and write only device tensors
// (scale, inv_scale, found_inf, growth_tracker), so a training step never
// needs the host to look at a value.
#pragma once

#include <vector>

#include "kernels/dispatch.h"

namespace mt::kernels {

struct ScaleUpdateArgs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0 = no bound
  double max_scale = 0;  // 0 = no bound
};

namespace cpu {
void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf, const Tensor& inv_scale);
void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, ScaleUpdateArgs args);
}  // namespace cpu

// For every element of every tensor: found_inf = 1 if it is inf or NaN, then
// x *= inv_scale (an undefined inv_scale only checks). One launch for the list.
inline void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf,
                                  const Tensor& inv_scale) {
  backend_for(found_inf.device(), "unscale_and_check_inf");
  cpu::unscale_and_check_inf(tensors, found_inf, inv_scale);
}

// PyTorch's update rule: on inf, scale *= backoff and the tracker resets;
// otherwise the tracker counts clean steps and at growth_interval the scale
// grows (unless that would overflow to inf) and the tracker resets.
inline void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                         ScaleUpdateArgs args) {
  backend_for(scale.device(), "update_scale");
  cpu::update_scale(scale, growth_tracker, found_inf, args);
}

}  // namespace mt::kernels
