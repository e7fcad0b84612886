// Fused LayerNorm over the trailing `normalized` elements of each row, and
// RMSNorm (the same kernels without the centering: math.h).
// weight/bias (and their gradients) may be undefined tensors.
//
// CPU tensors run kernels/layer_norm/cpu.cpp; SIM and CUDA tensors run
// kernels/layer_norm/cuda.cu on contiguous buffers of x's dtype, with mean
// and rstd in f32 (f64 for f64). Weight/bias grads are reduced in a fixed
// order (deterministic).
#pragma once

#include "kernels/layer_norm/cpu.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/layer_norm/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

inline void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                               const Tensor& mean, const Tensor& rstd) {
  const Backend backend = backend_for(y.device(), "layer_norm");
  if (backend == Backend::Cpu) return cpu::layer_norm_forward(x, weight, bias, eps, y, mean, rstd);
  using namespace device_buffers;
  const int64_t rows = mean.numel();
  const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
  const DType dtype = x.dtype(), stats = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "layer_norm");
  const Tensor vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype), vb = contiguous_as(bias, dtype);
  const Tensor vy = output_buffer(y, dtype), vmean = output_buffer(mean, stats), vrstd = output_buffer(rstd, stats);
  const Stream stream = launch_stream(y.device());
  MT_DEVICE_CALL(backend, layer_norm_forward, kd, vx.data_ptr(), data_or_null(vw), data_or_null(vb), eps, vy.data_ptr(),
                 vmean.data_ptr(), vrstd.data_ptr(), rows, cols, stream);
  finish_output(vy, y);
  finish_output(vmean, mean);
  finish_output(vrstd, rstd);
}

inline void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const Device device = dx.defined() ? dx.device() : x.device();
  const Backend backend = backend_for(device, "layer_norm_backward");
  if (backend == Backend::Cpu) return cpu::layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias);
  using namespace device_buffers;
  const int64_t rows = mean.numel();
  const int64_t cols = rows == 0 ? (weight.defined() ? weight.numel() : 0) : x.numel() / rows;
  const DType dtype = x.dtype(), stats = accumulator_dtype(dtype);
  const KernelDType kd = kernel_dtype(dtype, "layer_norm_backward");
  const Tensor vdy = contiguous_as(dy, dtype), vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype);
  const Tensor vmean = contiguous_as(mean, stats), vrstd = contiguous_as(rstd, stats);
  const Tensor vdx = output_buffer(dx, dtype), vdw = output_buffer(dweight, dtype), vdb = output_buffer(dbias, dtype);
  const Stream stream = launch_stream(device);
  MT_DEVICE_CALL(backend, layer_norm_backward, kd, vdy.data_ptr(), vx.data_ptr(), data_or_null(vw), vmean.data_ptr(),
                 vrstd.data_ptr(), mutable_data_or_null(vdx), mutable_data_or_null(vdw), mutable_data_or_null(vdb),
                 rows, cols, stream);
  finish_output(vdx, dx);
  finish_output(vdw, dweight);
  finish_output(vdb, dbias);
}

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row (f32; f64 for f64), saved for backward.
inline void rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  const Backend backend = backend_for(y.device(), "rms_norm");
  if (backend == Backend::Cpu) return cpu::layer_norm_forward(x, weight, Tensor(), eps, y, Tensor(), rstd);
  using namespace device_buffers;
  const int64_t rows = rstd.numel();
  const int64_t cols = rows == 0 ? 0 : x.numel() / rows;
  const DType dtype = x.dtype(), stats = accumulator_dtype(dtype);
  const Tensor vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype);
  const Tensor vy = output_buffer(y, dtype), vrstd = output_buffer(rstd, stats);
  MT_DEVICE_CALL(backend, rms_norm_forward, kernel_dtype(dtype, "rms_norm"), vx.data_ptr(), data_or_null(vw), eps,
                 vy.data_ptr(), vrstd.data_ptr(), rows, cols, launch_stream(y.device()));
  finish_output(vy, y);
  finish_output(vrstd, rstd);
}

inline void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                              const Tensor& dx, const Tensor& dweight) {
  const Device device = dx.defined() ? dx.device() : x.device();
  const Backend backend = backend_for(device, "rms_norm_backward");
  if (backend == Backend::Cpu) return cpu::layer_norm_backward(dy, x, weight, Tensor(), rstd, dx, dweight, Tensor());
  using namespace device_buffers;
  const int64_t rows = rstd.numel();
  const int64_t cols = rows == 0 ? (weight.defined() ? weight.numel() : 0) : x.numel() / rows;
  const DType dtype = x.dtype(), stats = accumulator_dtype(dtype);
  const Tensor vdy = contiguous_as(dy, dtype), vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype);
  const Tensor vrstd = contiguous_as(rstd, stats);
  const Tensor vdx = output_buffer(dx, dtype), vdw = output_buffer(dweight, dtype);
  MT_DEVICE_CALL(backend, rms_norm_backward, kernel_dtype(dtype, "rms_norm_backward"), vdy.data_ptr(), vx.data_ptr(),
                 data_or_null(vw), vrstd.data_ptr(), mutable_data_or_null(vdx), mutable_data_or_null(vdw), rows, cols,
                 launch_stream(device));
  finish_output(vdx, dx);
  finish_output(vdw, dweight);
}

}  // namespace mt::kernels
