// RoPE's rotation of one pair, shared by the CPU loops and the CUDA kernel.
//
// Element i of a head (i < D/2) pairs with element i + D/2 (HF Llama's
// rotate_half: the two halves, not interleaved neighbours). With c and s the
// cos and sin tables' values at those two places (the same angle, repeated
// over the halves),
//   forward   y1 = x1 c1 - x2 s1,        y2 = x2 c2 + x1 s2
//   backward  dx1 = dy1 c1 + dy2 s2,     dx2 = dy2 c2 - dy1 s1   (the transpose)
#pragma once

#include "runtime/macros.h"

namespace mt::kernels {

template <typename T>
MT_HOST_DEVICE inline void rope_pair(T x1, T x2, T c1, T c2, T s1, T s2, bool backward, T* y1, T* y2) {
  if (backward) {
    *y1 = x1 * c1 + x2 * s2;
    *y2 = x2 * c2 - x1 * s1;
  } else {
    *y1 = x1 * c1 - x2 * s1;
    *y2 = x2 * c2 + x1 * s2;
  }
}

}  // namespace mt::kernels
