// CPU reductions. Sums accumulate in double (f32 inputs) so the CPU result is
// a tight reference for the GPU's f32 tree reductions; var uses two passes
// (mean, then squared deviations) to avoid cancellation.
#include "kernels/reduce/cpu.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

// The reduction view lists the kept dims (args.rows elements) and then the
// reduced ones (args.cols). When memory holds the reduced dims outside and
// the kept ones contiguous inside (a bias gradient: [N, C] summed over N),
// returns the pointer to element 0: output r sums x[c * rows + r] over c.
// Walking rows would then read each output's inputs `rows` apart (and copy
// the transpose first); whole input rows are read in order instead. S is
// the stored type: a bf16 gradient under autocast is read as it is.
template <typename S>
const S* outer_reduced_base(const Tensor& view, ReduceArgs args) {
  if (view.dtype() != dtype_of<S>() || args.rows <= 1 || args.cols <= 1) return nullptr;
  int64_t kept = 0;
  for (int64_t product = 1; kept < view.dim() && product != args.rows; ++kept) product *= view.size(kept);
  // In memory order: reduced dims outer, kept dims inner, densely packed.
  int64_t expected = 1;
  auto packed = [&](int64_t d) {
    if (view.size(d) != 1 && view.stride(d) != expected) return false;
    expected *= view.size(d);
    return true;
  };
  for (int64_t d = kept; d-- > 0;) {
    if (!packed(d)) return nullptr;
  }
  for (int64_t d = view.dim(); d-- > kept;) {
    if (!packed(d)) return nullptr;
  }
  return static_cast<const S*>(view.data_ptr());
}

// Sum/Mean over outer dims: each thread owns a range of outputs and adds
// the input rows into their accumulators in c order, the same order (and
// double accumulation) as the row walk, so the result is bit-identical to it.
// Stored values S (f16/bf16) widen exactly to T on the way, as a load does.
template <typename T, typename S>
void reduce_outer(ReduceOp op, const S* x, const Tensor& out, ReduceArgs args) {
  std::vector<T> result(static_cast<size_t>(args.rows));
  parallel_for(args.rows, args.cols, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(end - begin), 0.0);
    for (int64_t c = 0; c < args.cols; ++c) {
      const S* row = x + c * args.rows + begin;
      for (int64_t r = 0; r < end - begin; ++r) acc[static_cast<size_t>(r)] += static_cast<T>(row[r]);
    }
    for (int64_t r = begin; r < end; ++r) {
      double v = acc[static_cast<size_t>(r - begin)];
      if (op == ReduceOp::Mean) v /= static_cast<double>(args.cols);
      result[static_cast<size_t>(r)] = static_cast<T>(v);
    }
  });
  store(result.data(), out);
}

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& in, const Tensor& out, ReduceArgs args) {
  if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
    if (const T* base = outer_reduced_base<T>(in, args)) return reduce_outer<T>(op, base, out, args);
    if constexpr (std::is_same_v<T, float>) {
      if (const BFloat16* base = outer_reduced_base<BFloat16>(in, args)) return reduce_outer<T>(op, base, out, args);
      if (const Half* base = outer_reduced_base<Half>(in, args)) return reduce_outer<T>(op, base, out, args);
    }
  }
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

void cumsum_rows(const Tensor& in, const Tensor& out, bool reverse) {
  MT_CHECK(in.is_contiguous() && out.is_contiguous() && in.sizes() == out.sizes() && in.dim() == 2,
           "cumsum_rows: expects contiguous [rows, cols] tensors of one shape, got {} and {}", in.shape_string(),
           out.shape_string());
  const Loaded<double> values(in);
  const int64_t rows = in.size(0), cols = in.size(1);
  HostScratch<double> scratch(in.numel());
  double* sums = scratch.get();
  for (int64_t r = 0; r < rows; ++r) {
    double running = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t c = reverse ? cols - 1 - j : j;
      running += values[r * cols + c];
      sums[r * cols + c] = running;
    }
  }
  store(sums, out);
}

}  // namespace mt::kernels::cpu
