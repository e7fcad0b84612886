// CPU reductions. Sums accumulate in double (f32 inputs) so the CPU result is
// a tight reference for the GPU's f32 tree reductions; var uses two passes
// (mean, then squared deviations) to avoid cancellation.
#include "kernels/reduce.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/strided.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args) {
  Loaded<T> x(in);
  std::vector<T> result(static_cast<size_t>(args.rows));
  parallel_for(args.rows, args.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x.data() + r * args.cols;
      double acc = 0;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Mean:
          for (int64_t c = 0; c < args.cols; ++c) acc += row[c];
          if (op == ReduceOp::Mean) acc /= static_cast<double>(args.cols);
          break;
        case ReduceOp::Var: {
          double mean = 0;
          for (int64_t c = 0; c < args.cols; ++c) mean += row[c];
          mean /= static_cast<double>(args.cols);
          for (int64_t c = 0; c < args.cols; ++c) acc += (row[c] - mean) * (row[c] - mean);
          const double denom = static_cast<double>(args.cols) - args.correction;
          acc = denom > 0 ? acc / denom : std::numeric_limits<double>::quiet_NaN();
          break;
        }
        case ReduceOp::Max:
        case ReduceOp::Min: fail("reduce: max/min go through reduce_rows_with_index");
      }
      result[static_cast<size_t>(r)] = static_cast<T>(acc);
    }
  });
  store(result.data(), out);
}

template <typename T>
void reduce_index_typed(ReduceOp op, const Tensor& in, const Tensor& values, const Tensor& indices, ReduceArgs args) {
  Loaded<T> x(in);
  std::vector<T> best(static_cast<size_t>(args.rows));
  std::vector<int64_t> where(static_cast<size_t>(args.rows));
  const bool is_max = op == ReduceOp::Max;
  for (int64_t r = 0; r < args.rows; ++r) {
    const T* row = x.data() + r * args.cols;
    int64_t arg = 0;
    for (int64_t c = 1; c < args.cols; ++c) {
      if (std::isnan(row[arg])) break;  // NaN wins, like PyTorch
      if (std::isnan(row[c]) || (is_max ? row[c] > row[arg] : row[c] < row[arg])) arg = c;
    }
    best[static_cast<size_t>(r)] = row[arg];
    where[static_cast<size_t>(r)] = arg;
  }
  if (values.defined()) store(best.data(), values);
  store(where.data(), indices);
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args) {
  MT_CHECK(in.numel() == args.rows * args.cols && out.numel() == args.rows,
           "reduce: {} input elements and {} outputs do not make {} rows of {}", in.numel(), out.numel(), args.rows,
           args.cols);
  if (computes_in_double(in.dtype())) {
    reduce_typed<double>(op, in, out, args);
  } else {
    reduce_typed<float>(op, in, out, args);
  }
}

void reduce_rows_with_index(ReduceOp op, const Tensor& in, const Tensor& values, const Tensor& indices,
                            ReduceArgs args) {
  MT_CHECK(args.cols > 0, "max/min/argmax: cannot reduce over an empty dimension");
  MT_CHECK(in.numel() == args.rows * args.cols && indices.numel() == args.rows,
           "reduce_with_index: {} input elements and {} outputs do not make {} rows of {}", in.numel(), indices.numel(),
           args.rows, args.cols);
  if (computes_in_double(in.dtype())) {
    reduce_index_typed<double>(op, in, values, indices, args);
  } else {
    reduce_index_typed<float>(op, in, values, indices, args);
  }
}

}  // namespace mt::kernels::cpu
