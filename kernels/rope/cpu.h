// The rope family's CPU back end (cpu.cpp), as the dispatcher (kernels/rope/rope.h) calls it.
#pragma once

#include "core/tensor.h"

namespace mt::kernels::cpu {
// x, y contiguous [..., positions, dim]; cos, sin contiguous [positions, dim] (f32, or f64 for f64 x).
void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y, bool backward);
}  // namespace mt::kernels::cpu
