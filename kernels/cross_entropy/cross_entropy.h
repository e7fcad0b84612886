// Cross-entropy fused with log_softmax, over logits [N, C] and i64 class
// indices [N]. Per-row losses and, for backward, each row's statistics
// [N, 2] (max, log sum exp(x - max)) are written in f32 (f64 for f64 logits);
// the reduction is the caller's.
//
// CPU tensors run kernels/cross_entropy/cpu.cpp; SIM and CUDA tensors run
// kernels/cross_entropy/cuda.cu. On the sim device targets are checked on the
// host (an out-of-range class is an mt::Error, as on the CPU); on a GPU the
// kernel cannot throw and writes NaN for that row instead.
#pragma once

#include "kernels/cross_entropy/cpu.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/cross_entropy/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace device_buffers {
inline void check_targets_on_host(const Tensor& target, int64_t classes, int64_t ignore_index) {
  if (!target.device().host_accessible()) return;
  const auto* values = static_cast<const int64_t*>(target.data_ptr());
  for (int64_t r = 0; r < target.numel(); ++r) {
    MT_CHECK(values[r] == ignore_index || (values[r] >= 0 && values[r] < classes),
             "cross_entropy: target {} at row {} is out of range for {} classes", values[r], r, classes);
  }
}
}  // namespace device_buffers

inline void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss,
                                  const Tensor& row_stats, CrossEntropyArgs args) {
  const Backend backend = backend_for(loss.device(), "cross_entropy");
  if (backend == Backend::Cpu) return cpu::cross_entropy_forward(logits, target, loss, row_stats, args);
  using namespace device_buffers;
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const DType dtype = logits.dtype(), acc = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "cross_entropy");
  const Tensor x = contiguous_as(logits, dtype), t = contiguous_as(target, kI64);
  check_targets_on_host(t, classes, args.ignore_index);
  const Tensor vloss = output_buffer(loss, acc), vstats = output_buffer(row_stats, acc);
  const Stream stream = launch_stream(loss.device());
  const auto* labels = static_cast<const int64_t*>(t.data_ptr());
  MT_DEVICE_CALL(backend, cross_entropy_forward, kd, x.data_ptr(), labels, vloss.data_ptr(), vstats.data_ptr(), rows,
                 classes, args.ignore_index, args.label_smoothing, stream);
  finish_output(vloss, loss);
  finish_output(vstats, row_stats);
}

inline void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& row_stats,
                                   const Tensor& grad_loss, const Tensor& grad_logits, CrossEntropyArgs args) {
  const Backend backend = backend_for(grad_logits.device(), "cross_entropy_backward");
  if (backend == Backend::Cpu)
    return cpu::cross_entropy_backward(logits, target, row_stats, grad_loss, grad_logits, args);
  using namespace device_buffers;
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const DType dtype = logits.dtype(), acc = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "cross_entropy_backward");
  const Tensor x = contiguous_as(logits, dtype), t = contiguous_as(target, kI64),
               vstats = contiguous_as(row_stats, acc);
  // A mean/sum reduction hands in one gradient expanded over the rows (stride 0): read it in place.
  const bool broadcast = grad_loss.dim() == 1 && grad_loss.stride(0) == 0 && grad_loss.dtype() == acc;
  const Tensor g = broadcast ? grad_loss : contiguous_as(grad_loss, acc);
  const Tensor dx = output_buffer(grad_logits, dtype);
  const Stream stream = launch_stream(grad_logits.device());
  const auto* labels = static_cast<const int64_t*>(t.data_ptr());
  const int64_t g_stride = broadcast ? 0 : 1;
  MT_DEVICE_CALL(backend, cross_entropy_backward, kd, x.data_ptr(), labels, vstats.data_ptr(), g.data_ptr(), g_stride,
                 dx.data_ptr(), rows, classes, args.ignore_index, args.label_smoothing, stream);
  finish_output(dx, grad_logits);
}

}  // namespace mt::kernels
