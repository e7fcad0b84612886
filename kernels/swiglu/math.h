// SwiGLU's per-element formulas, shared by the CPU loops and the CUDA kernels.
//   forward   y = silu(g) * u,          silu(g) = g * sigmoid(g)
//   backward  dg = dy * u * silu'(g),   silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
//             du = dy * silu(g)
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace mt::kernels {

template <typename T>
MT_HOST_DEVICE inline T swiglu_sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

// The formulas given s = sigmoid(g): the CPU's block path computes s for a
// whole block with a vectorised exp, then calls these.
template <typename T>
MT_HOST_DEVICE inline T swiglu_forward_given_sigmoid(T g, T s, T u) {
  return g * s * u;
}

template <typename T>
MT_HOST_DEVICE inline void swiglu_backward_given_sigmoid(T dy, T g, T s, T u, T* dg, T* du) {
  *dg = dy * u * s * (T(1) + g * (T(1) - s));
  *du = dy * g * s;
}

template <typename T>
MT_HOST_DEVICE inline T swiglu_forward_value(T g, T u) {
  return swiglu_forward_given_sigmoid(g, swiglu_sigmoid(g), u);
}

template <typename T>
MT_HOST_DEVICE inline void swiglu_backward_values(T dy, T g, T u, T* dg, T* du) {
  swiglu_backward_given_sigmoid(dy, g, swiglu_sigmoid(g), u, dg, du);
}

}  // namespace mt::kernels
