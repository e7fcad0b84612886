// The conv family's CUDA/sim entry points (cuda.cu, cudnn.cu), over raw
// contiguous NCHW buffers. Plain C++: kernels/conv/conv.h includes this and
// calls mt::sim::... for the SIM device or mt::cuda::... for a GPU.
//
// Convolution has two back ends (conv2d_backend below): mixtape's own
// im2col + GEMM kernels (cuda.cu, both builds) and cuDNN (cudnn.cu, GPU
// builds with cuDNN only).
//
// Element buffers have `dtype` (f16/bf16 as 16-bit bit patterns).
// Workspaces are allocated by the caller with the sizes the *_workspace
// helpers below give (in elements of `dtype`, or of f32 where stated).
// Optional pointers may be null.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/kernel_api.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::kernels {

// Everything about a convolution's shape, computed once by the op
// (autograd/ops_conv.cpp) and read by every back end: plain types, so nvcc
// reads it too.
struct ConvShape {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;

  int64_t group_in() const { return in_channels / groups; }
  int64_t group_out() const { return out_channels / groups; }
  int64_t patch() const { return group_in() * kernel_h * kernel_w; }  // K of the GEMM
  int64_t out_plane() const { return out_h * out_w; }                 // L
};

// Forward workspaces: col [N, G, K+1, L] and the packed weight [O, K+1]
// (the +1 row/column carries the bias through the GEMM).
inline int64_t conv2d_forward_col_elements(const ConvShape& s) {
  return s.batch * s.groups * (s.patch() + 1) * s.out_plane();
}
inline int64_t conv2d_forward_weight_elements(const ConvShape& s) { return s.out_channels * (s.patch() + 1); }
// Backward workspaces: col [N * G * K * L] (im2col for dW, then dcol for dx)
// and dy transposed [O, N, L].
inline int64_t conv2d_backward_col_elements(const ConvShape& s) {
  return s.batch * s.groups * s.patch() * s.out_plane();
}
inline int64_t conv2d_backward_dy_elements(const ConvShape& s) { return s.batch * s.out_channels * s.out_plane(); }

// The weight gradient is one GEMM per group whose reduction runs over N * L
// while its output, O x K, is small: as one launch it would occupy a handful
// of blocks for a very long time. Split the reduction over groups of samples
// instead: `splits` GEMMs batched into one launch each write f32 partial
// sums, and one pass adds them in a fixed order and rounds once
// (deterministic; no atomics). The split divides the batch, keeps every
// piece at least 1024 long, aims at about 256 output tiles in flight, and is
// 1 (no split) for f64 (its partials would be f32).
inline int64_t conv2d_weight_grad_splits(KernelDType dtype, const ConvShape& s) {
  if (dtype == KernelDType::F64 || s.groups <= 0 || s.batch <= 1) return 1;
  const int64_t og = s.out_channels / s.groups, reduction = s.batch * s.out_plane();
  const int64_t tiles = s.groups * ((og + 127) / 128) * ((s.patch() + 127) / 128);
  constexpr int64_t kTargetTiles = 256, kShortestPiece = 1024;
  int64_t splits = tiles > 0 ? (kTargetTiles + tiles - 1) / tiles : 1;
  if (splits > reduction / kShortestPiece) splits = reduction / kShortestPiece;
  if (splits > s.batch) splits = s.batch;
  while (splits > 1 && s.batch % splits != 0) --splits;
  return splits > 1 ? splits : 1;
}
// f32 workspace for the split's partial sums [splits, O, K]; 0 when not split.
inline int64_t conv2d_weight_grad_partial_elements(KernelDType dtype, const ConvShape& s) {
  const int64_t splits = conv2d_weight_grad_splits(dtype, s);
  return splits > 1 ? splits * s.out_channels * s.patch() : 0;
}

// Which implementation runs a CUDA-path convolution. Auto reads MT_CONV
// (auto|own|cudnn): auto is cuDNN on a GPU built with it, own kernels
// otherwise; MT_CONV=cudnn falls back to own where there is no cuDNN (the
// simulator, a build without it).
enum class ConvBackend : int { Auto, Own, Cudnn };

// The three convolutions cuDNN runs, each with its own algorithm and workspace.
enum class ConvPass : int { Forward, BackwardData, BackwardFilter };

// Whether cuDNN's 4-d descriptors can describe the convolution: every size
// positive (empty problems take the own path, which handles them) and within int.
inline bool conv2d_cudnn_fits(const ConvShape& s) {
  const int64_t sizes[] = {s.batch,      s.in_channels, s.in_h,     s.in_w,     s.out_channels,
                           s.kernel_h,   s.kernel_w,    s.stride_h, s.stride_w, s.dilation_h,
                           s.dilation_w, s.groups,      s.out_h,    s.out_w};
  for (int64_t size : sizes) {
    if (size <= 0 || size > INT32_MAX) return false;
  }
  return s.pad_h >= 0 && s.pad_h <= INT32_MAX && s.pad_w >= 0 && s.pad_w <= INT32_MAX;
}


}  // namespace mt::kernels

MT_CUDA_KERNEL_API(void conv2d_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight,
                                       const void* bias, void* y, const mt::kernels::ConvShape& shape,
                                       void* col_workspace, void* weight_workspace, mt::kernels::Stream stream))
// dx / dweight / dbias may be null; x is read only for dweight, weight only for dx.
// dweight_partials: conv2d_weight_grad_partial_elements floats (null when 0).
MT_CUDA_KERNEL_API(void conv2d_backward(mt::kernels::KernelDType dtype, const void* dy, const void* x,
                                        const void* weight, void* dx, void* dweight, void* dbias,
                                        const mt::kernels::ConvShape& shape, void* col_workspace, void* dy_workspace,
                                        float* dweight_partials, mt::kernels::Stream stream))

// The back end a CUDA-path convolution uses for `requested` (Own or Cudnn);
// Auto consults MT_CONV. Throws std::invalid_argument for a bad MT_CONV.
MT_CUDA_KERNEL_API(mt::kernels::ConvBackend conv2d_backend(mt::kernels::ConvBackend requested))
// The cuDNN back end (GPU build with cuDNN; the simulator build throws). The
// caller allocates the workspace: conv2d_cudnn_workspace_bytes chooses (once
// per device, dtype, shape and pass) the algorithm and says how many bytes it
// needs. conv2d_cudnn_backward runs BackwardData and BackwardFilter one after
// the other on `stream`, so one workspace of the larger size serves both.
// The shape must pass conv2d_cudnn_fits.
MT_CUDA_KERNEL_API(std::size_t conv2d_cudnn_workspace_bytes(mt::kernels::KernelDType dtype,
                                                            const mt::kernels::ConvShape& shape,
                                                            mt::kernels::ConvPass pass))
MT_CUDA_KERNEL_API(void conv2d_cudnn_forward(mt::kernels::KernelDType dtype, const void* x, const void* weight,
                                             const void* bias, void* y, const mt::kernels::ConvShape& shape,
                                             void* workspace, std::size_t workspace_bytes, mt::kernels::Stream stream))
// dx / dweight / dbias may be null; x is read only for dweight, weight only for dx.
MT_CUDA_KERNEL_API(void conv2d_cudnn_backward(mt::kernels::KernelDType dtype, const void* dy, const void* x,
                                              const void* weight, void* dx, void* dweight, void* dbias,
                                              const mt::kernels::ConvShape& shape, void* workspace,
                                              std::size_t workspace_bytes, mt::kernels::Stream stream))

// INT8 inference's patch gather (int8.cu): rows[(n * OH*OW + p) * K + k] =
// x[n, c, oy*s + i*d - pad, ox*s + j*d - pad] for p = (oy, ox) and k =
// (c*kH + i)*kW + j, the zero point outside the image. x u8 [N, C, H, W],
// rows u8 [N*OH*OW, C*kH*kW] (groups 1): the INT8 GEMM's activations.
MT_CUDA_KERNEL_API(void int8_im2row(const std::uint8_t* x, std::uint8_t zero_point,
                                    const mt::kernels::ConvShape& geometry, std::uint8_t* rows,
                                    mt::kernels::Stream stream))
