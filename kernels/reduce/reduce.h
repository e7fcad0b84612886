// Reductions. The caller permutes the input so the kept dims come first and the
// reduced dims last; the kernel then sees `rows` independent rows of `cols`
// elements (row-major over the permuted view) and writes one value per row.
#pragma once

#include "core/memory_ledger.h"
#include "kernels/reduce/cpu.h"
#include "kernels/reduce/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace detail {
// The scratch of a split reduction (a few long rows), or undefined.
inline Tensor reduce_workspace(const ReduceArgs& args, Device device) {
  if (reduce_split_chunks(args.rows, args.cols) <= 1) return Tensor();
  const MemoryCategoryScope scratch(MemoryCategory::Workspace);
  return empty({reduce_split_workspace_words(args.rows, args.cols)}, kF64, device);
}
}  // namespace detail

inline void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args) {
  MT_CHECK(in.numel() == args.rows * args.cols && out.numel() == args.rows,
           "reduce: {} input elements and {} outputs do not make {} rows of {}", in.numel(), out.numel(), args.rows,
           args.cols);
  MT_CHECK(op != ReduceOp::Max && op != ReduceOp::Min, "reduce: max/min go through reduce_rows_with_index");
  const Backend backend = backend_for(out.device(), "reduce");
  if (backend == Backend::Cpu) return cpu::reduce_rows(op, in, out, args);
  const Stream stream = launch_stream(out.device());
  const int code = static_cast<int>(op);
  const Tensor workspace = detail::reduce_workspace(args, out.device());
  void* scratch = workspace.defined() ? workspace.data_ptr() : nullptr;
  MT_DEVICE_CALL(backend, reduce_rows, code, tensor_ref(in), tensor_ref(out), args.rows, args.cols, args.correction,
                 scratch, stream);
  mark_written(out);
}
inline void reduce_rows_with_index(ReduceOp op, const Tensor& in, const Tensor& values, const Tensor& indices,
                                   ReduceArgs args) {
  MT_CHECK(args.cols > 0, "max/min/argmax: cannot reduce over an empty dimension");
  MT_CHECK(in.numel() == args.rows * args.cols && indices.numel() == args.rows && indices.dtype() == kI64,
           "reduce_with_index: {} input elements and {} i64 outputs do not make {} rows of {}", in.numel(),
           indices.numel(), args.rows, args.cols);
  const Backend backend = backend_for(indices.device(), "reduce_with_index");
  if (backend == Backend::Cpu) return cpu::reduce_rows_with_index(op, in, values, indices, args);
  const Stream stream = launch_stream(indices.device());
  const bool is_max = op == ReduceOp::Max;
  const TensorRef x = tensor_ref(in), v = tensor_ref(values), i = tensor_ref(indices);
  const Tensor workspace = detail::reduce_workspace(args, indices.device());
  void* scratch = workspace.defined() ? workspace.data_ptr() : nullptr;
  MT_DEVICE_CALL(backend, reduce_rows_with_index, is_max, x, v, i, args.rows, args.cols, scratch, stream);
  mark_written(values);
  mark_written(indices);
}

// The running sum along the last dim of contiguous [rows, cols] tensors
// (cumsum; `reverse` for its backward). CPU: f64 accumulation; CUDA/sim: f32
// (f64 for f64 and integers), one thread per row.
inline void cumsum_rows(const Tensor& in, const Tensor& out, bool reverse) {
  MT_CHECK(in.dim() == 2 && in.is_contiguous() && out.is_contiguous() && in.sizes() == out.sizes(),
           "cumsum: expects contiguous [rows, cols] tensors of one shape, got {} and {}", in.shape_string(),
           out.shape_string());
  const Backend backend = backend_for(out.device(), "cumsum");
  if (backend == Backend::Cpu) return cpu::cumsum_rows(in, out, reverse);
  MT_DEVICE_CALL(backend, cumsum_rows, tensor_ref(in), tensor_ref(out), in.size(0), in.size(1), reverse,
                 launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
