// Host entry points of kernels/reduce/cuda.cu. op: the mt::kernels::ReduceOp value.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

namespace mt::kernels {
// A few very long rows (a full-tensor sum) are split across blocks: each of
// `chunks` blocks per row sums a slice, then one block per row adds the
// slices in a fixed order (deterministic). 1 = one block per row.
inline std::int64_t reduce_split_chunks(std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kChunk = 8192, kMaxChunks = 4096;
  if (rows >= 128 || cols < 2 * kChunk) return 1;
  const std::int64_t chunks = (cols + kChunk - 1) / kChunk;
  return chunks < kMaxChunks ? chunks : kMaxChunks;
}
// Device scratch of a split reduction, in 8-byte words: per-slice partials
// and per-row means (sum/mean/var), or per-slice values and indices (max/min).
inline std::int64_t reduce_split_workspace_words(std::int64_t rows, std::int64_t cols) {
  return 2 * rows * reduce_split_chunks(rows, cols) + rows;
}
}  // namespace mt::kernels
// workspace: reduce_split_workspace_words(rows, cols) 8-byte words when
// reduce_split_chunks(rows, cols) > 1, else unused (may be null).
MT_CUDA_KERNEL_API(void reduce_rows(int op, const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& out,
                                    std::int64_t rows, std::int64_t cols, double correction, void* workspace,
                                    mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void reduce_rows_with_index(bool is_max, const mt::kernels::TensorRef& in,
                                               const mt::kernels::TensorRef& values,
                                               const mt::kernels::TensorRef& indices, std::int64_t rows,
                                               std::int64_t cols, void* workspace, mt::kernels::Stream stream))
// Running sums along rows of a contiguous [rows, cols] input into a
// contiguous output (any dtypes): out[r, c] = in[r, 0] + ... + in[r, c], or
// in[r, c] + ... + in[r, cols - 1] when `reverse` (cumsum's backward).
MT_CUDA_KERNEL_API(void cumsum_rows(const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& out,
                                    std::int64_t rows, std::int64_t cols, bool reverse, mt::kernels::Stream stream))
