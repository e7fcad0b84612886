#include <cmath>

#include "kernels/amp.h"
#include "kernels/cpu/strided.h"

namespace mt::kernels::cpu {

void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  float* flag = found_inf.data<float>();
  const float factor = inv_scale.defined() ? *inv_scale.data<float>() : 1.0f;
  bool any_nonfinite = false;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    Loaded<float> values(t);
    std::vector<float> scaled(static_cast<size_t>(values.size()));
    for (int64_t i = 0; i < values.size(); ++i) {
      const float v = values[i];
      any_nonfinite |= !std::isfinite(v);
      scaled[static_cast<size_t>(i)] = v * factor;
    }
    if (inv_scale.defined()) store(scaled.data(), t);
  }
  if (any_nonfinite) *flag = 1.0f;
  found_inf.storage()->bump_version();
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, ScaleUpdateArgs args) {
  float& s = *scale.data<float>();
  int32_t& tracker = *growth_tracker.data<int32_t>();
  if (*found_inf.data<float>() != 0.0f) {
    s = static_cast<float>(s * args.backoff_factor);
    if (args.min_scale > 0 && s < args.min_scale) s = static_cast<float>(args.min_scale);
    tracker = 0;
  } else if (++tracker >= args.growth_interval) {
    const auto grown = static_cast<float>(s * args.growth_factor);
    if (std::isfinite(grown)) s = grown;
    if (args.max_scale > 0 && s > args.max_scale) s = static_cast<float>(args.max_scale);
    tracker = 0;
  }
  scale.storage()->bump_version();
}

}  // namespace mt::kernels::cpu
