// The reduce family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/reduce/reduce.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/reduce/api.h"

namespace mt::kernels {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, Var };

struct ReduceArgs {
  int64_t rows = 0;
  int64_t cols = 0;
  double correction = 1;  // Var: divide by cols - correction (Bessel's correction by default)
};

namespace cpu {
void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args);
// Max/Min along rows, also writing the (first) index of the extreme value as i64.
void reduce_rows_with_index(ReduceOp op, const Tensor& in, const Tensor& values, const Tensor& indices,
                            ReduceArgs args);
// Running sums along the rows of a contiguous [rows, cols] input (reverse:
// from the row's end), accumulated in f64, into a contiguous output.
void cumsum_rows(const Tensor& in, const Tensor& out, bool reverse);
}  // namespace cpu

}  // namespace mt::kernels
