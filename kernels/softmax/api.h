// The softmax family's CUDA/sim entry points (cuda.cu, ladder/ladder.cu).
// Over raw contiguous row-major buffers [rows, cols]; element buffers have
// `dtype` (f16/bf16 as 16-bit bit patterns), row statistics and per-row
// values are f32, or f64 when dtype is f64. Optional pointers may be null.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

MT_CUDA_KERNEL_API(void softmax_forward(mt::kernels::KernelDType dtype, const void* in, void* out, int64_t rows,
                                        int64_t cols, bool log, mt::kernels::Stream stream))
namespace mt::kernels {
// The rungs of the softmax ladder (kernels/softmax/ladder/ladder.cu), for teaching and the benchmark;
// softmax_forward above is v4.
enum class SoftmaxRung : int { V1ThreadPerRow, V2WarpPerRow, V3VectorLoads, V4BlockPerRow };
inline const char* softmax_rung_name(SoftmaxRung rung) {
  switch (rung) {
    case SoftmaxRung::V1ThreadPerRow: return "v1 thread per row";
    case SoftmaxRung::V2WarpPerRow: return "v2 warp per row";
    case SoftmaxRung::V3VectorLoads: return "v3 vector loads";
    case SoftmaxRung::V4BlockPerRow: return "v4 block per row";
  }
  return "?";
}
}  // namespace mt::kernels
// softmax (not log) of each row by one rung; f64 and rows v3 cannot take
// (a width not a multiple of 16 bytes, unaligned buffers) run v4 and v2.
MT_CUDA_KERNEL_API(void softmax_ladder_forward(mt::kernels::SoftmaxRung rung, mt::kernels::KernelDType dtype,
                                               const void* in, void* out, int64_t rows, int64_t cols,
                                               mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void softmax_backward(mt::kernels::KernelDType dtype, const void* grad_out, const void* out,
                                         void* grad_in, int64_t rows, int64_t cols, bool log,
                                         mt::kernels::Stream stream))
