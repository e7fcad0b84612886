// SwiGLU, y = silu(gate) * up (Shazeer 2020; Llama's MLP), forward and backward.
//
// What: the gated activation between a Llama MLP's gate/up GEMMs and its
//   down GEMM, as one kernel where the unfused form is two (silu, then mul)
//   and keeps silu(gate) alive for backward; backward writes both input
//   gradients in one pass (kernels/swiglu/math.h).
// Algorithm: one thread per element, grid-stride.
// Precision: sigmoid, products and sums in f32 (f64 for f64), each output
//   rounded once to the input dtype.
// Bound: memory bandwidth. Measured speed: not yet measured on a GPU.
#include "kernels/common/element.h"
#include "kernels/swiglu/api.h"
#include "kernels/swiglu/math.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

template <typename E>
__global__ void swiglu_forward_kernel(const typename E::Storage* gate, const typename E::Storage* up,
                                      typename E::Storage* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = E::from_acc(kernels::swiglu_forward_value(E::to_acc(gate[i]), E::to_acc(up[i])));
  }
}

template <typename E>
__global__ void swiglu_backward_kernel(const typename E::Storage* grad_y, const typename E::Storage* gate,
                                       const typename E::Storage* up, typename E::Storage* grad_gate,
                                       typename E::Storage* grad_up, int64_t n) {
  using Acc = typename E::Acc;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc dg, du;
    kernels::swiglu_backward_values(E::to_acc(grad_y[i]), E::to_acc(gate[i]), E::to_acc(up[i]), &dg, &du);
    grad_gate[i] = E::from_acc(dg);
    grad_up[i] = E::from_acc(du);
  }
}

constexpr int kThreads = 256;

dim3 grid_for(int64_t n) { return dim3(static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096))); }

}  // namespace

void swiglu_forward(kernels::KernelDType dtype, const void* gate, const void* up, void* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    kernels::declare_launch_work(3.0 * n * sizeof(Storage));  // read gate and up, write y
    launch("swiglu_forward_kernel", swiglu_forward_kernel<E>, grid_for(n), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(gate), static_cast<const Storage*>(up), static_cast<Storage*>(y), n);
  });
}

void swiglu_backward(kernels::KernelDType dtype, const void* grad_y, const void* gate, const void* up, void* grad_gate,
                     void* grad_up, int64_t n, Stream stream) {
  if (n <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    kernels::declare_launch_work(5.0 * n * sizeof(Storage));  // read dy, gate and up, write both gradients
    launch("swiglu_backward_kernel", swiglu_backward_kernel<E>, grid_for(n), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(grad_y), static_cast<const Storage*>(gate), static_cast<const Storage*>(up),
           static_cast<Storage*>(grad_gate), static_cast<Storage*>(grad_up), n);
  });
}

}  // namespace mt::MT_KERNEL_NS
