#include "kernels/swiglu/cpu.h"

#include "kernels/common/strided.h"
#include "kernels/swiglu/math.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void forward_typed(const Tensor& gate, const Tensor& up, const Tensor& y) {
  Loaded<T> g(gate), u(up);
  OutputBuffer<T> out(y);
  T* py = out.data();
  parallel_for(gate.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) py[i] = swiglu_forward_value(g[i], u[i]);
  });
  out.commit();
}

template <typename T>
void backward_typed(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                    const Tensor& grad_up) {
  Loaded<T> dy(grad_y), g(gate), u(up);
  OutputBuffer<T> dg(grad_gate), du(grad_up);
  T *pdg = dg.data(), *pdu = du.data();
  parallel_for(gate.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) swiglu_backward_values(dy[i], g[i], u[i], pdg + i, pdu + i);
  });
  dg.commit();
  du.commit();
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& y) {
  if (gate.dtype() == kF64) {
    forward_typed<double>(gate, up, y);
  } else {
    forward_typed<float>(gate, up, y);
  }
}

void swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up, const Tensor& grad_gate,
                     const Tensor& grad_up) {
  if (gate.dtype() == kF64) {
    backward_typed<double>(grad_y, gate, up, grad_gate, grad_up);
  } else {
    backward_typed<float>(grad_y, gate, up, grad_gate, grad_up);
  }
}

}  // namespace mt::kernels::cpu
