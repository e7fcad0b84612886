// softmax / log_softmax over the last dim of a [rows, cols] problem. The
// caller passes views whose last dim is the softmax dim.
//
// CPU tensors run kernels/softmax/cpu.cpp; SIM and CUDA tensors run
// kernels/softmax/cuda.cu (one block per row, online max/sum) on contiguous
// buffers — a strided view is copied contiguous on its device first.
#pragma once

#include "kernels/softmax/cpu.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/softmax/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

inline void softmax_forward(const Tensor& in, const Tensor& out, bool log) {
  const Backend backend = backend_for(out.device(), "softmax");
  if (backend == Backend::Cpu) return cpu::softmax_forward(in, out, log);
  using namespace device_buffers;
  const int64_t cols = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t rows = cols == 0 ? 0 : in.numel() / cols;
  const DType dtype = out.dtype();
  const KernelDType kd = kernel_dtype(dtype, "softmax");
  const Tensor x = contiguous_as(in, dtype);
  const Tensor y = output_buffer(out, dtype);
  const Stream stream = launch_stream(out.device());
  MT_DEVICE_CALL(backend, softmax_forward, kd, x.data_ptr(), y.data_ptr(), rows, cols, log, stream);
  finish_output(y, out);
}

inline void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  const Backend backend = backend_for(grad_in.device(), "softmax_backward");
  if (backend == Backend::Cpu) return cpu::softmax_backward(grad_out, out, grad_in, log);
  using namespace device_buffers;
  const int64_t cols = out.dim() == 0 ? 1 : out.size(-1);
  const int64_t rows = cols == 0 ? 0 : out.numel() / cols;
  const DType dtype = grad_in.dtype();
  const KernelDType kd = kernel_dtype(dtype, "softmax_backward");
  const Tensor dy = contiguous_as(grad_out, dtype), y = contiguous_as(out, dtype);
  const Tensor dx = output_buffer(grad_in, dtype);
  const Stream stream = launch_stream(grad_in.device());
  MT_DEVICE_CALL(backend, softmax_backward, kd, dy.data_ptr(), y.data_ptr(), dx.data_ptr(), rows, cols, log, stream);
  finish_output(dx, grad_in);
}

}  // namespace mt::kernels
