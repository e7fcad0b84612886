// Host entry points of kernels/cuda/indexing.cu. Every tensor here is
// contiguous (the dispatcher in kernels/indexing.h makes it so) and indices are i64.
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_api.h"
#include "kernels/cuda/tensor_ref.h"

// out[o, j, k] = in[o, index[j], k], seen as [outer, mid, inner] / [outer, n, inner].
MT_CUDA_KERNEL_API(void index_select(const mt::kernels::TensorRef& in, std::int64_t dim,
                                     const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& out,
                                     mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void index_add(const mt::kernels::TensorRef& out, std::int64_t dim,
                                  const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& src,
                                  mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gather(const mt::kernels::TensorRef& in, std::int64_t dim, const mt::kernels::TensorRef& index,
                               const mt::kernels::TensorRef& out, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void scatter_add(const mt::kernels::TensorRef& out, std::int64_t dim,
                                    const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& src,
                                    mt::kernels::Stream stream))
