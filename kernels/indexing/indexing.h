// Index kernels (i64 indices, range-checked): index_select / index_add along
// one dim (embedding is index_select on dim 0) and gather / scatter_add.
// index_add and scatter_add accumulate in a fixed order: deterministic.
#pragma once

#include "core/graph.h"
#include "core/memory_ledger.h"
#include "kernels/indexing/cpu.h"
#include "kernels/indexing/api.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::kernels {

namespace detail {

// The device kernels take contiguous tensors and i64 indices; these make
// contiguous copies on the tensor's own device (and write results back).
inline Tensor contiguous_as(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor c = empty(t.sizes(), dtype, t.device());
  kernels::copy(t, c);
  return c;
}
inline Tensor as_vector_if_scalar(const Tensor& t) { return t.dim() == 0 ? make_view(t, {1}, {1}, t.offset()) : t; }

// On the sim device indices are host memory: check them like the CPU does,
// so an out-of-range index is an mt::Error rather than a trap.
// (Not while a CUDA graph is being captured: the launches are recorded, not
// run, so indices computed inside the captured step do not exist yet.)
inline void check_indices(const char* op, const Tensor& index, int64_t size) {
  if (!index.device().host_accessible() || graph_capture_active()) return;
  const auto* values = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t i = 0; i < index.numel(); ++i) {
    MT_CHECK(values[i] >= 0 && values[i] < size, "{}: index {} at position {} is out of range for a dim of size {}", op,
             values[i], i, size);
  }
}

}  // namespace detail

inline void index_select(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  if (backend_for(out.device(), "index_select") == Backend::Cpu) return cpu::index_select(in, dim, index, out);
  const Tensor src = detail::contiguous_as(in, in.dtype());
  const Tensor idx = detail::contiguous_as(index, kI64);
  const Tensor dst = out.is_contiguous() ? out : empty(out.sizes(), out.dtype(), out.device());
  detail::check_indices("index_select", idx, in.dim() == 0 ? 1 : in.size(dim));
  MT_DEVICE_CALL(backend_for(out.device(), "index_select"), index_select, tensor_ref(src), dim, tensor_ref(idx),
                 tensor_ref(dst), launch_stream(out.device()));
  if (!dst.is_same(out)) kernels::copy(dst, out);
  mark_written(out);
}
// out.select(dim, index[i]) += src.select(dim, i)
inline void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (backend_for(out.device(), "index_add") == Backend::Cpu) return cpu::index_add(out, dim, index, src);
  const Tensor values = detail::contiguous_as(src, src.dtype());
  const Tensor idx = detail::contiguous_as(index, kI64);
  const Tensor dst = detail::contiguous_as(out, out.dtype());
  const int64_t destinations = out.dim() == 0 ? 1 : out.size(dim);
  detail::check_indices("index_add", idx, destinations);
  MT_CHECK(idx.numel() < (int64_t{1} << 32) && destinations < (int64_t{1} << 32),
           "index_add: {} indices into a dim of {}: the device kernel takes fewer than 2^32 of each", idx.numel(),
           destinations);
  Tensor workspace;
  {
    const MemoryCategoryScope scratch(MemoryCategory::Workspace);
    const auto words = static_cast<int64_t>(index_add_workspace_bytes(destinations, idx.numel()) / sizeof(unsigned));
    workspace = empty({words}, kI32, out.device());
  }
  MT_DEVICE_CALL(backend_for(out.device(), "index_add"), index_add, tensor_ref(dst), dim, tensor_ref(idx),
                 tensor_ref(values), workspace.data_ptr(), launch_stream(out.device()));
  if (!dst.is_same(out)) kernels::copy(dst, out);
  mark_written(out);
}
inline void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  if (backend_for(out.device(), "gather") == Backend::Cpu) return cpu::gather(in, dim, index, out);
  const Tensor src = detail::as_vector_if_scalar(detail::contiguous_as(in, in.dtype()));
  const Tensor idx = detail::as_vector_if_scalar(detail::contiguous_as(index, kI64));
  const Tensor dst = out.is_contiguous() ? out : empty(out.sizes(), out.dtype(), out.device());
  detail::check_indices("gather", idx, src.size(dim == 0 || in.dim() == 0 ? 0 : dim));
  MT_DEVICE_CALL(backend_for(out.device(), "gather"), gather, tensor_ref(src), dim, tensor_ref(idx), tensor_ref(dst),
                 launch_stream(out.device()));
  if (!dst.is_same(out)) kernels::copy(dst, out);
  mark_written(out);
}
inline void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (backend_for(out.device(), "scatter_add") == Backend::Cpu) return cpu::scatter_add(out, dim, index, src);
  const Tensor values = detail::as_vector_if_scalar(detail::contiguous_as(src, src.dtype()));
  const Tensor idx = detail::as_vector_if_scalar(detail::contiguous_as(index, kI64));
  const Tensor dst = detail::contiguous_as(out, out.dtype());
  const Tensor dst_view = detail::as_vector_if_scalar(dst);
  detail::check_indices("scatter_add", idx, dst_view.size(out.dim() == 0 ? 0 : dim));
  MT_DEVICE_CALL(backend_for(out.device(), "scatter_add"), scatter_add, tensor_ref(dst_view), dim, tensor_ref(idx),
                 tensor_ref(values), launch_stream(out.device()));
  if (!dst.is_same(out)) kernels::copy(dst, out);
  mark_written(out);
}

}  // namespace mt::kernels
