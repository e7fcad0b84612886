// The cross_entropy family's CUDA/sim entry points (cuda.cu).
// Over raw contiguous row-major buffers [rows, cols]; element buffers have
// `dtype` (f16/bf16 as 16-bit bit patterns), row statistics and per-row
// values are f32, or f64 when dtype is f64. Optional pointers may be null.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

// target: i64 class indices [rows]. A row whose target is ignore_index gets
// loss 0 (and zero gradient); a target outside [0, classes) gives NaN (the
// kernel cannot throw; the CPU backend does). row_stats: [rows, 2] of the
// accumulator type, (max, log sum exp(x - max)) per row, for backward.
MT_CUDA_KERNEL_API(void cross_entropy_forward(mt::kernels::KernelDType dtype, const void* logits, const int64_t* target,
                                              void* loss, void* row_stats, int64_t rows, int64_t classes,
                                              int64_t ignore_index, double label_smoothing, mt::kernels::Stream stream))
// grad_loss[r * grad_loss_stride] (stride 0: one value broadcast to every row).
MT_CUDA_KERNEL_API(void cross_entropy_backward(mt::kernels::KernelDType dtype, const void* logits,
                                               const int64_t* target, const void* row_stats, const void* grad_loss,
                                               int64_t grad_loss_stride, void* grad_logits, int64_t rows,
                                               int64_t classes, int64_t ignore_index, double label_smoothing,
                                               mt::kernels::Stream stream))
