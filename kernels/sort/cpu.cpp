// Sorting rows on the CPU: per row, the column numbers are ordered by
// kernels::sorts_before (math.h) with std::stable_sort, or
// std::partial_sort when only the first k < cols are wanted (topk): a heap of
// k instead of a full sort. Values are compared in their compute type (f32
// for f32/f16/bf16, f64 for the rest), which orders them exactly as stored.
#include "kernels/sort/cpu.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/sort/math.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void sort_rows_typed(const Tensor& in, const Tensor& indices, int64_t k, bool descending) {
  const Loaded<T> values(in);
  const int64_t cols = in.size(-1), rows = cols == 0 ? 0 : in.numel() / cols;
  int64_t* out = indices.data<int64_t>();
  std::vector<int64_t> order(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = values.data() + r * cols;
    auto before = [&](int64_t a, int64_t b) { return sorts_before(row[a], a, row[b], b, descending); };
    std::iota(order.begin(), order.end(), int64_t{0});
    if (k < cols) {
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    } else {
      std::stable_sort(order.begin(), order.end(), before);
    }
    std::copy_n(order.begin(), k, out + r * k);
  }
}

}  // namespace

void sort_rows(const Tensor& in, const Tensor& indices, int64_t k, bool descending) {
  MT_CHECK(in.is_contiguous() && indices.is_contiguous() && indices.dtype() == kI64 && in.dim() == 2 &&
               indices.size(0) == in.size(0) && indices.size(1) == k && k <= in.size(1),
           "sort_rows: expects a contiguous [rows, cols] input and i64 [rows, k] indices, got {} and {}",
           in.shape_string(), indices.shape_string());
  if (computes_in_double(in.dtype())) {
    sort_rows_typed<double>(in, indices, k, descending);
  } else {
    sort_rows_typed<float>(in, indices, k, descending);
  }
}

}  // namespace mt::kernels::cpu
