// The amp family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/amp/amp.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/amp/api.h"

namespace mt::kernels {

struct ScaleUpdateArgs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0 = no bound
  double max_scale = 0;  // 0 = no bound
};

namespace cpu {
void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf, const Tensor& inv_scale,
                           const Tensor& per_tensor);
void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, ScaleUpdateArgs args);
}  // namespace cpu

}  // namespace mt::kernels
