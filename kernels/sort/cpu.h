// The sort family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/sort/sort.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mt::kernels::cpu {
// in: contiguous [rows, cols]; indices: contiguous i64 [rows, k].
void sort_rows(const Tensor& in, const Tensor& indices, int64_t k, bool descending);
}  // namespace mt::kernels::cpu
