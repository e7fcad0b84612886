// Host entry points of kernels/elementwise/cuda.cu (mt::sim:: and mt::cuda::).
#pragma once

#include "kernels/elementwise/math.h"
#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

MT_CUDA_KERNEL_API(void unary(mt::kernels::UnaryOp op, const mt::kernels::TensorRef& in,
                              const mt::kernels::TensorRef& out, double a, double b, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void unary_backward(mt::kernels::UnaryOp op, const mt::kernels::TensorRef& grad_out,
                                       const mt::kernels::TensorRef& in, const mt::kernels::TensorRef& out,
                                       const mt::kernels::TensorRef& grad_in, double a, double b,
                                       mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void binary(mt::kernels::BinaryOp op, const mt::kernels::TensorRef& a,
                               const mt::kernels::TensorRef& b, const mt::kernels::TensorRef& out,
                               mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void where(const mt::kernels::TensorRef& cond, const mt::kernels::TensorRef& a,
                              const mt::kernels::TensorRef& b, const mt::kernels::TensorRef& out,
                              mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void copy(const mt::kernels::TensorRef& src, const mt::kernels::TensorRef& dst,
                             mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void fill(const mt::kernels::TensorRef& out, double value, mt::kernels::Stream stream))
