// The order sort and topk put values in, once for the CPU and the CUDA
// kernels: by value (ascending or descending), NaN after every number when
// ascending and before when descending (PyTorch's rule: NaN counts as the
// largest value), and equal values by their index (a stable sort).
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace mt::kernels {

// Does (a at column ai) come before (b at column bi)?
template <typename T>
MT_HOST_DEVICE inline bool sorts_before(T a, int64_t ai, T b, int64_t bi, bool descending) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return descending ? a_nan : b_nan;
  if (!a_nan && a != b) return descending ? a > b : a < b;
  return ai < bi;
}

}  // namespace mt::kernels
