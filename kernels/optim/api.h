// The optim family's CUDA/sim entry points (cuda.cu): fused multi-tensor
// AdamW and SGD steps, the device-side LR schedule, and the gradient-norm
// clip. Every tensor is contiguous; device scalars (found_inf, inv_scale,
// step, ...) are f32 unless noted and are read only by the kernels, never by
// the host.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/multi_tensor_api.h"
#include "kernels/optim/lr_schedule.h"
#include "kernels/optim/math.h"
#include "kernels/optim/state_format.h"

namespace mt::kernels {

// One parameter of a fused optimizer step (pointers to contiguous data).
struct OptimSlotRef {
  void* param = nullptr;  // written only when `master` is set
  DType param_dtype = DType::F32;
  const void* grad = nullptr;
  DType grad_dtype = DType::F32;
  float* master = nullptr;  // f32 master weights, or null: the update reads and writes `param`
  void* state1 = nullptr;   // exp_avg / momentum buffer (null: SGD without momentum)
  void* state2 = nullptr;   // exp_avg_sq
  // f32, or the parameter's f16/bf16 for a pure low-precision optimizer (no
  // master weights: the state lives in the parameter's dtype, as in PyTorch).
  DType state_dtype = DType::F32;
  float* step = nullptr;  // f32 [1]
  std::int64_t numel = 0;
  bool stochastic_bf16 = false;    // write param from master by stochastic rounding (bits: state_format.h)
  StateFormat state_format = StateFormat::Plain;  // state_format.h
  std::int32_t state_block = 2048;                // Int8Blockwise: values per absmax
  float* absmax1 = nullptr;                       // Int8Blockwise: one per block of state1 / state2
  float* absmax2 = nullptr;
  std::uint64_t rounding_key = 0;  // the Philox key of this parameter's rounding bits
};

}  // namespace mt::kernels

// codes: the device's copy of dynamic_codes() (512 floats), read by
// Int8Blockwise slots only.
MT_CUDA_KERNEL_API(void adamw_step(const mt::kernels::OptimSlotRef* slots, int count,
                                   const mt::kernels::AdamWArgs& args, const float* inv_scale, const float* found_inf,
                                   const double* lr_factor, const float* codes, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void sgd_step(const mt::kernels::OptimSlotRef* slots, int count, const mt::kernels::SgdArgs& args,
                                 const float* inv_scale, const float* found_inf, const double* lr_factor,
                                 const float* codes, mt::kernels::Stream stream))
// The device-side LR schedule: unless *found_inf, ++*step_count; then
// *factor = the schedule's multiplier at *step_count (one thread).
MT_CUDA_KERNEL_API(void advance_lr_schedule(const mt::kernels::LrSchedule& schedule, long long* step_count,
                                            const float* found_inf, double* factor, mt::kernels::Stream stream))
// partials: scratch of (total chunks) floats on the device; out: f32 [1].
MT_CUDA_KERNEL_API(void sum_of_squares(const mt::kernels::TensorRef* tensors, int count, float* partials, float* out,
                                       mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void scale_by_clip_coefficient(const mt::kernels::TensorRef* tensors, int count,
                                                  const float* total_norm, double max_norm, mt::kernels::Stream stream))
