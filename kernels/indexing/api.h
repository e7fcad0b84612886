// Host entry points of kernels/indexing/cuda.cu. Every tensor here is
// contiguous (the dispatcher in kernels/indexing/indexing.h makes it so) and indices are i64.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

// out[o, j, k] = in[o, index[j], k], seen as [outer, mid, inner] / [outer, n, inner].
MT_CUDA_KERNEL_API(void index_select(const mt::kernels::TensorRef& in, std::int64_t dim,
                                     const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& out,
                                     mt::kernels::Stream stream))
namespace mt::kernels {
// The scratch index_add needs on the device: 4-byte counts, starts and
// cursors per destination and two lists of positions (n < 2^32, mid < 2^32).
inline std::size_t index_add_workspace_bytes(std::int64_t mid, std::int64_t n) {
  return static_cast<std::size_t>(3 * mid + 2 + 2 * n) * sizeof(unsigned);
}
}  // namespace mt::kernels
// out[o, index[j], k] += src[o, j, k], seen as [outer, mid, inner] / [outer, n, inner],
// summed per destination in index order (deterministic, the CPU's order).
MT_CUDA_KERNEL_API(void index_add(const mt::kernels::TensorRef& out, std::int64_t dim,
                                  const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& src,
                                  void* workspace, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gather(const mt::kernels::TensorRef& in, std::int64_t dim, const mt::kernels::TensorRef& index,
                               const mt::kernels::TensorRef& out, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void scatter_add(const mt::kernels::TensorRef& out, std::int64_t dim,
                                    const mt::kernels::TensorRef& index, const mt::kernels::TensorRef& src,
                                    mt::kernels::Stream stream))
