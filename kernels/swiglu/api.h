// The swiglu family's CUDA/sim entry points (cuda.cu), over contiguous
// buffers of `dtype` with n elements each.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

// y = silu(gate) * up
MT_CUDA_KERNEL_API(void swiglu_forward(mt::kernels::KernelDType dtype, const void* gate, const void* up, void* y,
                                       int64_t n, mt::kernels::Stream stream))
// grad_gate and grad_up from grad_y (one pass, both written)
MT_CUDA_KERNEL_API(void swiglu_backward(mt::kernels::KernelDType dtype, const void* grad_y, const void* gate,
                                        const void* up, void* grad_gate, void* grad_up, int64_t n,
                                        mt::kernels::Stream stream))
