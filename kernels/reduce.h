// Reductions. The caller permutes the input so the kept dims come first and the
// reduced dims last; the kernel then sees `rows` independent rows of `cols`
// elements (row-major over the permuted view) and writes one value per row.
#pragma once

#include "kernels/dispatch.h"

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
}  // namespace cpu

inline void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args) {
  backend_for(out.device(), "reduce");
  cpu::reduce_rows(op, in, out, args);
}
inline void reduce_rows_with_index(ReduceOp op, const Tensor& in, const Tensor& values, const Tensor& indices,
                                   ReduceArgs args) {
  backend_for(indices.device(), "reduce_with_index");
  cpu::reduce_rows_with_index(op, in, values, indices, args);
}

}  // namespace mt::kernels
