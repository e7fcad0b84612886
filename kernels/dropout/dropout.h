// Dropout with Philox: element i is kept when its uniform u_i >= p, where u_i
// is word i%4 of Philox block (offset + i/4) under the seed (core/philox.h).
// The CUDA kernel draws the same u_i, so masks match across devices.
#pragma once

#include "kernels/dropout/cpu.h"
#include "kernels/dropout/api.h"
#include "kernels/dispatch.h"

namespace mt::kernels {

inline void dropout_forward(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  const Backend backend = backend_for(out.device(), "dropout");
  if (backend == Backend::Cpu) return cpu::dropout_forward(in, out, mask, args);
  MT_CHECK(mask.dtype() == kU8 && mask.is_contiguous() && mask.numel() == in.numel(),
           "dropout: mask must be a contiguous u8 tensor of {} elements", in.numel());
  MT_CHECK(in.sizes() == out.sizes(), "dropout: input shape {} does not match output shape {}", in.shape_string(),
           out.shape_string());
  MT_DEVICE_CALL(backend, dropout_forward, tensor_ref(in), tensor_ref(out), tensor_ref(mask), args.p, args.seed,
                 args.block_offset, launch_stream(out.device()));
  mark_written(out);
  mark_written(mask);
}
inline void dropout_backward(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  const Backend backend = backend_for(grad_in.device(), "dropout_backward");
  if (backend == Backend::Cpu) return cpu::dropout_backward(grad_out, mask, grad_in, p);
  MT_CHECK(mask.is_contiguous() && mask.numel() == grad_out.numel(),
           "dropout_backward: mask must be contiguous with {} elements", grad_out.numel());
  const Tensor mask_view = make_view(mask, grad_out.sizes(), contiguous_strides(grad_out.sizes()), mask.offset());
  MT_DEVICE_CALL(backend, dropout_backward, tensor_ref(grad_out), tensor_ref(mask_view), tensor_ref(grad_in), p,
                 launch_stream(grad_in.device()));
  mark_written(grad_in);
}

}  // namespace mt::kernels
