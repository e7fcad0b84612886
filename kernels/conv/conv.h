// 2-D convolution (cross-correlation, as in PyTorch) over NCHW tensors.
//
// x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] (may be undefined),
// y [N, O, OH, OW]. The CPU kernels lower each sample and group to one GEMM:
// im2col unrolls the receptive fields into a [C/groups*KH*KW, OH*OW] matrix,
// y_g = W_g @ col. Backward: dW_g += dy_g @ col^T, dcol = W_g^T @ dy_g folded
// back into dx by col2im, dbias = sum of dy over N, OH, OW.
//
// SIM and CUDA tensors run one of two back ends on contiguous buffers of the
// convolution's dtype, with workspaces allocated here on the device (the
// caching allocator):
//   own    kernels/conv/cuda.cu: im2col + the production GEMM of
//          kernels/gemm (Tensor Cores for f16/bf16); its col buffers
//          hold the whole batch, KH*KW times the input.
//   cuDNN  kernels/conv/cudnn.cu (GPU builds with cuDNN): the workspace
//          is what the chosen cuDNN algorithms ask for, and the own col
//          buffers are not allocated.
// MT_CONV=auto|own|cudnn chooses; auto is cuDNN on a GPU that has it, own on
// the sim device (which has no cuDNN; MT_CONV=cudnn falls back to own there).
#pragma once

#include <algorithm>
#include <stdexcept>

#include "kernels/conv/cpu.h"
#include "kernels/conv/api.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

namespace device_buffers {
// Whether this convolution runs cuDNN rather than the own kernels (asked on
// the sim device too, so a bad MT_CONV is an error everywhere).
inline bool conv2d_runs_cudnn(Backend backend, const ConvShape& shape, const char* op) {
  ConvBackend chosen = ConvBackend::Own;
  try {
    if (backend == Backend::Sim) {
      chosen = ::mt::sim::conv2d_backend(ConvBackend::Auto);
    } else {
#if defined(MT_WITH_CUDA_KERNELS)
      chosen = ::mt::cuda::conv2d_backend(ConvBackend::Auto);
#endif
    }
  } catch (const std::invalid_argument& error) {
    fail("{}: {}", op, error.what());
  }
  return backend == Backend::Cuda && chosen == ConvBackend::Cudnn && conv2d_cudnn_fits(shape);
}

// Runs a cuDNN entry point; its std::exceptions (cuDNN status errors carry
// the call, cudnnGetErrorString and the shape) become mt::Error naming the op.
template <typename Fn>
auto run_cudnn(const char* op, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    fail("{}: {}", op, error.what());
  }
}

inline size_t conv2d_cudnn_workspace(KernelDType dtype, const ConvShape& shape, ConvPass pass) {
  MT_CUDA_CALL(conv2d_cudnn_workspace_bytes(dtype, shape, pass));
}

// The cuDNN workspace of the passes a backward runs (they share it: one stream, one after the other).
inline size_t conv2d_cudnn_backward_workspace(KernelDType dtype, const ConvShape& shape, bool dx, bool dweight) {
  size_t bytes = 0;
  if (dx) bytes = std::max(bytes, conv2d_cudnn_workspace(dtype, shape, ConvPass::BackwardData));
  if (dweight) bytes = std::max(bytes, conv2d_cudnn_workspace(dtype, shape, ConvPass::BackwardFilter));
  return bytes;
}

}  // namespace device_buffers

inline void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                           const Tensor& y) {
  const Backend backend = backend_for(y.device(), "conv2d");
  if (backend == Backend::Cpu) return cpu::conv2d_forward(x, weight, bias, geometry, y);
  using namespace device_buffers;
  MT_CHECK(x.sizes() == Shape({geometry.batch, geometry.in_channels, geometry.in_h, geometry.in_w}) &&
               y.sizes() == Shape({geometry.batch, geometry.out_channels, geometry.out_h, geometry.out_w}),
           "conv2d kernel: x {} / y {} do not match the geometry", x.shape_string(), y.shape_string());
  const ConvShape& shape = geometry;
  const bool cudnn = conv2d_runs_cudnn(backend, shape, "conv2d");
  MT_CHECK(
      cudnn || (shape.patch() + 1 <= INT32_MAX && shape.out_plane() <= INT32_MAX && shape.out_channels <= INT32_MAX),
      "conv2d kernel: x {} with weight {} is too large for the GEMM's 32-bit sizes", x.shape_string(),
      weight.shape_string());
  const DType dtype = y.dtype();
  const KernelDType kd = kernel_dtype(dtype, "conv2d");
  const Tensor vx = contiguous_as(x, dtype), vw = contiguous_as(weight, dtype), vb = contiguous_as(bias, dtype);
  const Tensor vy = output_buffer(y, dtype);
  const Stream stream = launch_stream(y.device());
  const MemoryCategoryScope workspace_memory(MemoryCategory::Workspace);  // what follows is scratch
  if (cudnn) {
    run_cudnn("conv2d", [&] {
      const size_t bytes = conv2d_cudnn_workspace(kd, shape, ConvPass::Forward);
      const Tensor workspace = empty({static_cast<int64_t>(bytes)}, kU8, y.device());
      MT_CUDA_CALL(conv2d_cudnn_forward(kd, vx.data_ptr(), vw.data_ptr(), data_or_null(vb), vy.data_ptr(), shape,
                                        workspace.data_ptr(), bytes, stream));
    });
  } else {
    const Tensor col = empty({conv2d_forward_col_elements(shape)}, dtype, y.device());
    const Tensor packed = bias.defined() ? empty({conv2d_forward_weight_elements(shape)}, dtype, y.device()) : Tensor();
    MT_DEVICE_CALL(backend, conv2d_forward, kd, vx.data_ptr(), vw.data_ptr(), data_or_null(vb), vy.data_ptr(), shape,
                   col.data_ptr(), mutable_data_or_null(packed), stream);
  }
  finish_output(vy, y);
}

inline void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                            const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const Backend backend = backend_for(dy.device(), "conv2d_backward");
  if (backend == Backend::Cpu) return cpu::conv2d_backward(dy, x, weight, geometry, dx, dweight, dbias);
  using namespace device_buffers;
  // The gradients have the convolution's compute dtype (dy might have been handed over in another).
  const Tensor& any_grad = dx.defined() ? dx : dweight.defined() ? dweight : dbias;
  if (!any_grad.defined()) return;
  MT_CHECK(dy.sizes() == Shape({geometry.batch, geometry.out_channels, geometry.out_h, geometry.out_w}),
           "conv2d_backward kernel: dy {} does not match the geometry", dy.shape_string());
  MT_CHECK(!dweight.defined() || x.defined(), "conv2d_backward kernel: the weight gradient needs x");
  MT_CHECK(!dx.defined() || weight.defined(), "conv2d_backward kernel: the input gradient needs the weight");
  const ConvShape& shape = geometry;
  const bool cudnn = conv2d_runs_cudnn(backend, shape, "conv2d_backward");
  MT_CHECK(cudnn || (shape.batch * shape.out_plane() <= INT32_MAX && shape.patch() <= INT32_MAX),
           "conv2d_backward kernel: dy {} is too large for the GEMM's 32-bit sizes", dy.shape_string());
  const DType dtype = any_grad.dtype();
  const KernelDType kd = kernel_dtype(dtype, "conv2d_backward");
  const Tensor vdy = contiguous_as(dy, dtype);
  const Tensor vx = dweight.defined() ? contiguous_as(x, dtype) : Tensor();
  const Tensor vw = dx.defined() ? contiguous_as(weight, dtype) : Tensor();
  const Tensor vdx = output_buffer(dx, dtype), vdw = output_buffer(dweight, dtype), vdb = output_buffer(dbias, dtype);
  const Device device = dy.device();
  const Stream stream = launch_stream(device);
  const MemoryCategoryScope workspace_memory(MemoryCategory::Workspace);  // what follows is scratch
  if (cudnn) {
    run_cudnn("conv2d_backward", [&] {
      const size_t bytes = conv2d_cudnn_backward_workspace(kd, shape, dx.defined(), dweight.defined());
      const Tensor workspace = empty({static_cast<int64_t>(bytes)}, kU8, device);
      MT_CUDA_CALL(conv2d_cudnn_backward(kd, vdy.data_ptr(), data_or_null(vx), data_or_null(vw),
                                         mutable_data_or_null(vdx), mutable_data_or_null(vdw),
                                         mutable_data_or_null(vdb), shape, workspace.data_ptr(), bytes, stream));
    });
  } else {
    const Tensor col =
        dx.defined() || dweight.defined() ? empty({conv2d_backward_col_elements(shape)}, dtype, device) : Tensor();
    const Tensor dy_t = dweight.defined() ? empty({conv2d_backward_dy_elements(shape)}, dtype, device) : Tensor();
    const int64_t partial_count = dweight.defined() ? conv2d_weight_grad_partial_elements(kd, shape) : 0;
    const Tensor partials = partial_count > 0 ? empty({partial_count}, kF32, device) : Tensor();
    MT_DEVICE_CALL(backend, conv2d_backward, kd, vdy.data_ptr(), data_or_null(vx), data_or_null(vw),
                   mutable_data_or_null(vdx), mutable_data_or_null(vdw), mutable_data_or_null(vdb), shape,
                   mutable_data_or_null(col), mutable_data_or_null(dy_t),
                   partials.defined() ? static_cast<float*>(partials.data_ptr()) : nullptr, stream);
  }
  finish_output(vdx, dx);
  finish_output(vdw, dweight);
  finish_output(vdb, dbias);
}

}  // namespace mt::kernels
