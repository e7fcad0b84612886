// Sorting rows (sort, topk, argsort) by rank counting.
//
// What: for each row of a contiguous [rows, cols] input, the columns of its
// first k values in sorted order (kernels/sort/math.h: by value, NaN as the
// largest, equal values by column: a stable sort).
//
// Algorithm: one block per row; the thread of column c counts the columns
// that sort before it. That count is c's place in the sorted row, so the
// thread writes c to indices[row, place] when place < k. Because the order is
// total (ties go by column), the places are a permutation: no two threads
// write the same slot and no slot is left empty, with no synchronisation at
// all. Values are compared in their compute type (f32 for f32/f16/bf16, f64
// for the rest), which orders them exactly as stored.
//
// Cost: cols^2 comparisons per row, all reads of the one row, which the L1
// and L2 caches serve: right for the rows models sort (a head's scores, a
// sampler's top-k over a few thousand candidates); a 50k-entry vocabulary
// row is 2.5e9 comparisons, where a radix select (PyTorch's topk) or a
// bitonic sort in shared memory would be the next rung. Measured speed: not
// yet measured on a GPU.
#include "kernels/elementwise/loop.h"
#include "kernels/sort/api.h"
#include "kernels/sort/math.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {

namespace {

template <typename T>
__global__ void sort_rows_kernel(const void* in, DType dtype, std::int64_t* indices, std::int64_t rows,
                                 std::int64_t cols, std::int64_t k, bool descending) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t first = row * cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T value = load_as<T>(in, dtype, first + c);
      std::int64_t place = 0;
      for (std::int64_t j = 0; j < cols; ++j) {
        if (kernels::sorts_before(load_as<T>(in, dtype, first + j), j, value, c, descending)) ++place;
      }
      if (place < k) indices[row * k + place] = c;
    }
  }
}

}  // namespace

void sort_rows(const TensorRef& in, const TensorRef& indices, std::int64_t rows, std::int64_t cols, std::int64_t k,
               bool descending, Stream stream) {
  if (rows == 0 || k == 0) return;
  const dim3 grid(static_cast<unsigned>(rows < 65535 ? rows : 65535));
  int threads = 32;
  while (threads < cols && threads < 256) threads *= 2;
  auto* out = static_cast<std::int64_t*>(indices.data);
  if (kernels::computes_in_double(in.dtype)) {
    launch("sort_rows_kernel", sort_rows_kernel<double>, grid, dim3(threads), 0, stream,
           static_cast<const void*>(in.data), in.dtype, out, rows, cols, k, descending);
  } else {
    launch("sort_rows_kernel", sort_rows_kernel<float>, grid, dim3(threads), 0, stream,
           static_cast<const void*>(in.data), in.dtype, out, rows, cols, k, descending);
  }
}

}  // namespace mt::MT_KERNEL_NS
