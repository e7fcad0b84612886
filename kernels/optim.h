// Fused optimizer kernels over lists of parameters (one call per dtype group).
//
// Each slot is one parameter with its gradient (any floating dtype), an
// optional f32 master copy, and its f32 state. The kernel reads found_inf and
// inv_scale itself: on inf/NaN it returns without touching anything, so the
// skip decision never leaves the device. The step counter lives in a device
// tensor and only advances on steps that ran.
#pragma once

#include <vector>

#include "kernels/common/optim.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

struct ParamSlot {
  Tensor param;   // model parameter (f32, or f16/bf16 with a master)
  Tensor grad;    // its gradient, any floating dtype
  Tensor master;  // f32 master copy, or undefined: update the parameter itself
  Tensor state1;  // AdamW exp_avg / SGD momentum buffer
  Tensor state2;  // AdamW exp_avg_sq
  Tensor step;    // f32 [1]: updates this parameter has had (0 = momentum buffer still empty)
};

struct AmpControl {
  Tensor inv_scale;  // f32 [1]: gradients are multiplied by it (undefined = 1)
  Tensor found_inf;  // f32 [1]: non-zero skips the update (undefined = never)
};

struct StochasticRounding {
  bool enabled = false;  // bf16 parameters written from masters by stochastic rounding
  uint64_t seed = 0;
  uint64_t block_offset = 0;
};

namespace cpu {
void adamw_step(const std::vector<ParamSlot>& slots, const AdamWArgs& args, const AmpControl& amp,
                const StochasticRounding& rounding);
void sgd_step(const std::vector<ParamSlot>& slots, const SgdArgs& args, const AmpControl& amp,
              const StochasticRounding& rounding);
void sum_of_squares(const std::vector<Tensor>& tensors, const Tensor& out);
void scale_by_clip_coefficient(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm);
}  // namespace cpu

// Each slot's step counter is incremented before its update, unless the step is skipped.
inline void adamw_step(const std::vector<ParamSlot>& slots, const AdamWArgs& args, const AmpControl& amp,
                       const StochasticRounding& rounding = {}) {
  if (slots.empty()) return;
  backend_for(slots.front().param.device(), "adamw_step");
  cpu::adamw_step(slots, args, amp, rounding);
}
inline void sgd_step(const std::vector<ParamSlot>& slots, const SgdArgs& args, const AmpControl& amp,
                     const StochasticRounding& rounding = {}) {
  if (slots.empty()) return;
  backend_for(slots.front().param.device(), "sgd_step");
  cpu::sgd_step(slots, args, amp, rounding);
}
// out (f32 [1]) = sum over all tensors of x^2, accumulated in f32 (f64 on the CPU).
inline void sum_of_squares(const std::vector<Tensor>& tensors, const Tensor& out) {
  backend_for(out.device(), "sum_of_squares");
  cpu::sum_of_squares(tensors, out);
}
// x *= min(1, max_norm / (total_norm + 1e-6)) for every tensor, computed on the device.
inline void scale_by_clip_coefficient(const std::vector<Tensor>& tensors, const Tensor& total_norm,
                                      double max_norm) {
  backend_for(total_norm.device(), "scale_by_clip_coefficient");
  cpu::scale_by_clip_coefficient(tensors, total_norm, max_norm);
}

}  // namespace mt::kernels
