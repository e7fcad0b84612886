// The amp family's CUDA/sim entry points (cuda.cu): the GradScaler's fused
// unscale + inf check and scale update. Every tensor is contiguous; device
// scalars (found_inf, inv_scale, scale) are f32 and are read only by the
// kernels, never by the host.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/multi_tensor_api.h"

// found_inf |= any non-finite element; then x *= *inv_scale when inv_scale is not null.
// per_tensor (optional, f32 [count]): entry i = 1 when tensor i held one.
MT_CUDA_KERNEL_API(void unscale_and_check_inf(const mt::kernels::TensorRef* tensors, int count, float* found_inf,
                                              const float* inv_scale, float* per_tensor, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                                     double growth_factor, double backoff_factor, std::int64_t growth_interval,
                                     double min_scale, double max_scale, mt::kernels::Stream stream))
