// Batched matrix multiply: out[b] = a[b] @ b[b] (+ bias broadcast over rows).
// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N]; any strides (a
// transposed view is read in place when it is a plain column-major matrix).
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

namespace cpu {
void bmm(const Tensor& a, const Tensor& b, const Tensor& out);
}

inline void bmm(const Tensor& a, const Tensor& b, const Tensor& out) {
  backend_for(out.device(), "bmm");
  cpu::bmm(a, b, out);
}

}  // namespace mt::kernels
