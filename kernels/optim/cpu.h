// The optim family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/optim/optim.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/optim/lr_schedule.h"
#include "kernels/optim/math.h"

namespace mt::kernels {

struct ParamSlot {
  Tensor param;   // model parameter (f32, or f16/bf16 with a master)
  Tensor grad;    // its gradient, any floating dtype
  Tensor master;  // f32 master copy, or undefined: update the parameter itself
  Tensor state1;  // AdamW exp_avg / SGD momentum buffer
  Tensor state2;  // AdamW exp_avg_sq
  Tensor step;    // f32 [1]: updates this parameter has had (0 = momentum buffer still empty)
};

// What an update reads on the device besides the slots.
struct AmpControl {
  Tensor inv_scale;  // f32 [1]: gradients are multiplied by it (undefined = 1)
  Tensor found_inf;  // f32 [1]: non-zero skips the update (undefined = never)
  Tensor lr_factor;  // f64 [1]: the device-side schedule's multiplier of lr (undefined = 1)
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
void advance_lr_schedule(const LrSchedule& schedule, const Tensor& step_count, const Tensor& found_inf,
                         const Tensor& factor);
void scale_by_clip_coefficient(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm);
}  // namespace cpu

}  // namespace mt::kernels
