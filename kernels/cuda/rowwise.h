// Host entry points of the row-wise CUDA kernels (softmax.cu, layer_norm.cu,
// cross_entropy.cu), over raw contiguous row-major buffers [rows, cols].
// Plain C++: kernels/softmax.h etc. include this and call mt::sim::... for the
// SIM device or mt::cuda::... for a GPU.
//
// Element buffers (in/out/x/y/dy/dx/weight/bias/logits/grad_logits) have
// `dtype` (f16/bf16 as 16-bit bit patterns). Row statistics and per-row
// values (mean, rstd, loss, lse, grad_loss) are f32, or f64 when dtype is f64.
// Optional pointers may be null (weight, bias, dweight, dbias, dx).
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/cuda/kernel_dtype.h"

MT_CUDA_KERNEL_API(void softmax_forward(mt::kernels::KernelDType dtype, const void* in, void* out, int64_t rows,
                                        int64_t cols, bool log, mt::kernels::Stream stream))
namespace mt::kernels {
// The rungs of the softmax ladder (kernels/cuda/softmax_ladder.cu), for teaching and the benchmark;
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
MT_CUDA_KERNEL_API(void layer_norm_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight,
                                           const void* bias, double eps, void* y, void* mean, void* rstd, int64_t rows,
                                           int64_t cols, mt::kernels::Stream stream))
namespace mt::kernels {
// The rungs of the layer_norm ladder (kernels/cuda/layer_norm_ladder.cu), for teaching and the benchmark;
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
