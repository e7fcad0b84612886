// The optim family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/optim/optim.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/optim/lr_schedule.h"
#include "kernels/optim/math.h"
#include "kernels/optim/state_format.h"

namespace mt::kernels {

struct ParamSlot {
  Tensor param;   // model parameter (f32, or f16/bf16 with a master)
  Tensor grad;    // its gradient, any floating dtype
  Tensor master;  // f32 master copy, or undefined: update the parameter itself
  Tensor state1;  // AdamW exp_avg / SGD momentum buffer
  Tensor state2;  // AdamW exp_avg_sq
  Tensor step;    // f32 [1]: updates this parameter has had (0 = momentum buffer still empty)
  // How state1/state2 are stored (kernels/optim/state_format.h). Int8Blockwise:
  // u8 codes, with absmax1/absmax2 f32 [ceil(numel / state_block)] beside them.
  StateFormat state_format = StateFormat::Plain;
  Tensor absmax1;
  Tensor absmax2;
  int64_t state_block = 2048;
  uint64_t rounding_key = 0;  // the Philox key of this parameter's rounding bits (state_format.h)
  Tensor codes;            // Int8Blockwise off the CPU: dynamic_codes() on the device (f32 [512])
};

// What an update reads on the device besides the slots.
struct AmpControl {
  Tensor inv_scale;  // f32 [1]: gradients are multiplied by it (undefined = 1)
  Tensor found_inf;  // f32 [1]: non-zero skips the update (undefined = never)
  Tensor lr_factor;  // f64 [1]: the device-side schedule's multiplier of lr (undefined = 1)
};

struct StochasticRounding {
  bool enabled = false;  // bf16 parameters written from masters by stochastic rounding (bits: state_format.h)
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
// nearest_code (state_format.h) by the CPU's faster table lookup: the same
// byte for every float, NaN and infinities included.
uint8_t nearest_state_code(bool is_signed, float x);
// 8-bit state to f32 values and back (state_format.h), for a checkpoint whose
// state format differs from the optimizer's. CPU tensors; codes and values
// shaped alike, absmax one f32 per block of `block` values.
Tensor dequantize_blockwise(const Tensor& codes, const Tensor& absmax, int64_t block, bool is_signed);
void quantize_blockwise(const Tensor& values, int64_t block, bool is_signed, const Tensor& codes,
                        const Tensor& absmax);
}  // namespace cpu

}  // namespace mt::kernels
