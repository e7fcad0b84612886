// The rope family's CUDA/sim entry point (cuda.cu), over contiguous buffers:
// x and y [rows, dim] of `dtype` (row r at position r % positions), the
// tables cos and sin [positions, dim] of the accumulation type (f32; f64 for
// f64). backward: y is the input gradient from x = the output gradient.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

MT_CUDA_KERNEL_API(void rope(mt::kernels::KernelDType dtype, const void* x, const void* cos, const void* sin, void* y,
                             int64_t rows, int64_t positions, int64_t dim, bool backward, mt::kernels::Stream stream))
