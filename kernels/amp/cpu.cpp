#include "kernels/amp/cpu.h"

#include <cmath>

#include "kernels/common/strided.h"

namespace mt::kernels::cpu {

void unscale_and_check_inf(const std::vector<Tensor>& tensors, const Tensor& found_inf, const Tensor& inv_scale,
                           const Tensor& per_tensor) {
  float* flag = found_inf.data<float>();
  float* flags = per_tensor.defined() ? per_tensor.data<float>() : nullptr;
  const float factor = inv_scale.defined() ? *inv_scale.data<float>() : 1.0f;
  bool any_nonfinite = false;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    if (!t.defined()) continue;
    Loaded<float> values(t);
    std::vector<float> scaled(static_cast<size_t>(values.size()));
    bool nonfinite = false;
    for (int64_t i = 0; i < values.size(); ++i) {
      const float v = values[i];
      nonfinite |= !std::isfinite(v);
      scaled[static_cast<size_t>(i)] = v * factor;
    }
    if (inv_scale.defined()) store(scaled.data(), t);
    if (nonfinite && flags != nullptr) flags[k] = 1.0f;
    any_nonfinite |= nonfinite;
  }
  if (any_nonfinite) *flag = 1.0f;
  found_inf.storage()->bump_version();
  if (flags != nullptr) per_tensor.storage()->bump_version();
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
