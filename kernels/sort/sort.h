// Sorting along the last dim of a contiguous [rows, cols] tensor: the
// indices of each row's first k values in sorted order (topk: k < cols; sort:
// k = cols). The values themselves are gathered by the caller
// (autograd/ops_sort.cpp), whose gather gives them their gradient.
#pragma once

#include "kernels/dispatch.h"
#include "kernels/sort/api.h"
#include "kernels/sort/cpu.h"

namespace mt::kernels {

inline void sort_rows(const Tensor& in, const Tensor& indices, int64_t k, bool descending) {
  MT_CHECK(in.dim() == 2 && in.is_contiguous() && indices.is_contiguous() && indices.dtype() == kI64 &&
               indices.dim() == 2 && indices.size(0) == in.size(0) && indices.size(1) == k && k <= in.size(1),
           "sort_rows: expects a contiguous [rows, cols] input and i64 [rows, k] indices, got {} and {}",
           in.shape_string(), indices.shape_string());
  const Backend backend = backend_for(indices.device(), "sort");
  if (backend == Backend::Cpu) return cpu::sort_rows(in, indices, k, descending);
  MT_DEVICE_CALL(backend, sort_rows, tensor_ref(in), tensor_ref(indices), in.size(0), in.size(1), k, descending,
                 launch_stream(indices.device()));
  mark_written(indices);
}

}  // namespace mt::kernels
