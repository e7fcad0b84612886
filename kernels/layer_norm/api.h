// The layer_norm family's CUDA/sim entry points (cuda.cu, ladder/ladder.cu):
// LayerNorm, and RMSNorm (LayerNorm without the centering).
// Over raw contiguous row-major buffers [rows, cols]; element buffers have
// `dtype` (f16/bf16 as 16-bit bit patterns), row statistics and per-row
// values are f32, or f64 when dtype is f64. Optional pointers may be null.
// mean and rstd: [rows] row statistics saved for backward.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

MT_CUDA_KERNEL_API(void layer_norm_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight,
                                           const void* bias, double eps, void* y, void* mean, void* rstd, int64_t rows,
                                           int64_t cols, mt::kernels::Stream stream))
namespace mt::kernels {
// The rungs of the layer_norm ladder (kernels/layer_norm/ladder/ladder.cu), for teaching and the benchmark;
// layer_norm_forward above is v4.
enum class LayerNormRung : int { V1ThreadPerRow, V2WarpPerRow, V3VectorLoads, V4BlockPerRow };
inline const char* layer_norm_rung_name(LayerNormRung rung) {
  switch (rung) {
    case LayerNormRung::V1ThreadPerRow: return "v1 thread per row";
    case LayerNormRung::V2WarpPerRow: return "v2 warp per row";
    case LayerNormRung::V3VectorLoads: return "v3 vector loads";
    case LayerNormRung::V4BlockPerRow: return "v4 block per row";
  }
  return "?";
}
}  // namespace mt::kernels
// layer_norm forward by one rung (the arguments of layer_norm_forward); f64
// and rows v3 cannot take (a width not a multiple of 16 bytes, unaligned x
// or y) run v4 and v2.
MT_CUDA_KERNEL_API(void layer_norm_ladder_forward(mt::kernels::LayerNormRung rung, mt::kernels::KernelDType dtype,
                                                  const void* x, const void* weight, const void* bias, double eps,
                                                  void* y, void* mean, void* rstd, int64_t rows, int64_t cols,
                                                  mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void layer_norm_backward(mt::kernels::KernelDType dtype, const void* dy, const void* x,
                                            const void* weight, const void* mean, const void* rstd, void* dx,
                                            void* dweight, void* dbias, int64_t rows, int64_t cols,
                                            mt::kernels::Stream stream))
// RMSNorm: the same kernels not centered (no mean, no bias); rstd = 1 / sqrt(mean(x^2) + eps) per row.
MT_CUDA_KERNEL_API(void rms_norm_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight, double eps,
                                         void* y, void* rstd, int64_t rows, int64_t cols, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void rms_norm_backward(mt::kernels::KernelDType dtype, const void* dy, const void* x,
                                          const void* weight, const void* rstd, void* dx, void* dweight, int64_t rows,
                                          int64_t cols, mt::kernels::Stream stream))
