// SwiGLU, fused: the CPU runs kernels/swiglu/cpu.cpp, SIM and CUDA tensors
// kernels/swiglu/cuda.cu, on contiguous buffers of one dtype.
#pragma once

#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/swiglu/api.h"
#include "kernels/swiglu/cpu.h"

namespace mt::kernels {

inline void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  using namespace device_buffers;
  const DType dtype = y.dtype();
  const Tensor vg = contiguous_as(gate, dtype), vu = contiguous_as(up, dtype);
  const Backend backend = backend_for(y.device(), "swiglu");
  const Tensor vy = output_buffer(y, dtype);
  if (backend == Backend::Cpu) {
    cpu::swiglu_forward(vg, vu, vy);
  } else {
    MT_DEVICE_CALL(backend, swiglu_forward, kernel_dtype(dtype, "swiglu"), vg.data_ptr(), vu.data_ptr(),
                   vy.data_ptr(), y.numel(), launch_stream(y.device()));
  }
  finish_output(vy, y);
}

inline void swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                            const Tensor& grad_up) {
  using namespace device_buffers;
  const DType dtype = grad_gate.dtype();
  const Tensor vdy = contiguous_as(grad_y, dtype), vg = contiguous_as(gate, dtype), vu = contiguous_as(up, dtype);
  const Tensor vdg = output_buffer(grad_gate, dtype), vdu = output_buffer(grad_up, dtype);
  const Backend backend = backend_for(grad_gate.device(), "swiglu_backward");
  if (backend == Backend::Cpu) {
    cpu::swiglu_backward(vdy, vg, vu, vdg, vdu);
  } else {
    MT_DEVICE_CALL(backend, swiglu_backward, kernel_dtype(dtype, "swiglu_backward"), vdy.data_ptr(), vg.data_ptr(),
                   vu.data_ptr(), vdg.data_ptr(), vdu.data_ptr(), grad_gate.numel(), launch_stream(grad_gate.device()));
  }
  finish_output(vdg, grad_gate);
  finish_output(vdu, grad_up);
}

}  // namespace mt::kernels
