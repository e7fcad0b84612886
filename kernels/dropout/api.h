// Host entry points of kernels/dropout/cuda.cu.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

// mask: contiguous u8 with in's element count.
MT_CUDA_KERNEL_API(void dropout_forward(const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& out,
                                        const mt::kernels::TensorRef& mask, double p, std::uint64_t seed,
                                        std::uint64_t block_offset, mt::kernels::Stream stream))
// mask: viewed with grad_out's shape (contiguous strides).
MT_CUDA_KERNEL_API(void dropout_backward(const mt::kernels::TensorRef& grad_out, const mt::kernels::TensorRef& mask,
                                         const mt::kernels::TensorRef& grad_in, double p, mt::kernels::Stream stream))
