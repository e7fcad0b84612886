// Rotary position embeddings, fused: the CPU runs kernels/rope/cpu.cpp, SIM
// and CUDA tensors kernels/rope/cuda.cu, on contiguous buffers of x's dtype
// with the tables in f32 (f64 for f64).
#pragma once

#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/rope/api.h"
#include "kernels/rope/cpu.h"

namespace mt::kernels {

// y = rope(x) (or, backward, its transpose); x [..., T, D], cos and sin [T, D].
inline void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y, bool backward) {
  using namespace device_buffers;
  const DType acc = accumulator_dtype(x.dtype());
  const Tensor vx = contiguous_as(x, x.dtype()), vc = contiguous_as(cos, acc), vs = contiguous_as(sin, acc);
  const Backend backend = backend_for(y.device(), "rope");
  if (backend == Backend::Cpu) return cpu::rope(vx, vc, vs, y, backward);
  const Tensor vy = output_buffer(y, x.dtype());
  const int64_t dim = x.size(-1), rows = dim == 0 ? 0 : x.numel() / dim;
  MT_DEVICE_CALL(backend, rope, kernel_dtype(x.dtype(), "rope"), vx.data_ptr(), vc.data_ptr(), vs.data_ptr(),
                 vy.data_ptr(), rows, cos.size(0), dim, backward, launch_stream(y.device()));
  finish_output(vy, y);
}

}  // namespace mt::kernels
