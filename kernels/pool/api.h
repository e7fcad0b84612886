// The pool family's CUDA/sim entry points (cuda.cu), over raw contiguous
// NCHW buffers ([planes, H, W]); element buffers have `dtype`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::kernels {

// A pooling window: what the op's arguments say, whatever the tensors.
struct Pool2dWindow {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling only
};

// The window over a problem's sizes: `planes` [H, W] inputs, [OH, OW] outputs.
struct PoolShape : Pool2dWindow {
  int64_t planes = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
};

}  // namespace mt::kernels

// indices: i64 [planes, OH, OW], h * W + w of each window's max.
MT_CUDA_KERNEL_API(void max_pool2d_forward(mt::kernels::KernelDType dtype, const void* x, void* y, int64_t* indices,
                                           const mt::kernels::PoolShape& shape, mt::kernels::Stream stream))
// acc_workspace: [planes, H, W] acc elements (may be dx itself for f32/f64).
MT_CUDA_KERNEL_API(void max_pool2d_backward(mt::kernels::KernelDType dtype, const void* dy, const int64_t* indices,
                                            void* dx, void* acc_workspace, const mt::kernels::PoolShape& shape,
                                            mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void avg_pool2d_forward(mt::kernels::KernelDType dtype, const void* x, void* y,
                                           const mt::kernels::PoolShape& shape, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void avg_pool2d_backward(mt::kernels::KernelDType dtype, const void* dy, void* dx,
                                            const mt::kernels::PoolShape& shape, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void adaptive_avg_pool2d_forward(mt::kernels::KernelDType dtype, const void* x, void* y,
                                                    const mt::kernels::PoolShape& shape, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void adaptive_avg_pool2d_backward(mt::kernels::KernelDType dtype, const void* dy, void* dx,
                                                     const mt::kernels::PoolShape& shape, mt::kernels::Stream stream))
