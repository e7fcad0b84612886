// Row reductions: sum, mean, var (two-pass), and max/min with their index.
//
// What: the caller permutes the input so the reduced dims come last; the
// kernel sees `rows` rows of `cols` elements (row-major over that possibly
// strided view) and writes one value per row.
//
// Algorithm: one block per row (grid-stride over rows). Each thread folds a
// strided slice of the row into a register, then the block combines:
// warp shuffles (__shfl_down_sync, 5 steps) inside each warp, one value per
// warp through shared memory, and a last shuffle round in warp 0. Var makes a
// second pass over the row for sum((x - mean)^2) instead of E[x^2] - E[x]^2,
// which cancels catastrophically when the mean is large. max/min carry
// (value, index) pairs; the first NaN wins and ties keep the lowest index, as
// on the CPU and in PyTorch.
//
// Precision: f32/f16/bf16 accumulate in f32 (the CPU reference in f64), f64
// and integers in f64; rounded once on store.
//
// A few very long rows (a full-tensor sum: one row of every element) would
// leave all but a few SMs idle with a block per row, so sum/mean/var split
// them (kernels::reduce_split_chunks): a grid of slices x rows writes one
// partial sum per slice, then a block per row adds its partials in a fixed
// order — deterministic, like every reduction here. Var runs that twice
// (sum -> mean, then squared deviations). max/min/argmax split the same way:
// each slice finds its best (value, index) pair, then a block per row picks
// among the slices' pairs with the same rule (first NaN, lowest index on ties).
//
// Bound: memory bandwidth for long rows. The block size follows the row
// length (32..256 threads), so short rows do not idle 256 threads. Measured
// speed: not yet measured on a GPU.
#include "runtime/launch.h"

#include "kernels/elementwise/loop.h"
#include "kernels/reduce/api.h"

namespace mt::MT_KERNEL_NS {

namespace {

enum : int { kSum = 0, kMean = 1, kMax = 2, kMin = 3, kVar = 4 };  // mt::kernels::ReduceOp

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of every thread's v, returned to all threads. `scratch` holds 32 T.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : T(0);
    v = warp_sum(v);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const T total = scratch[0];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

// Does candidate (b, bi) beat the current best (a, ai)? ai < 0 means "no value yet".
template <typename T>
__device__ __forceinline__ bool beats(T a, std::int64_t ai, T b, std::int64_t bi, bool is_max) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan) return b_nan && bi < ai;
  if (b_nan) return true;
  if (is_max ? b > a : b < a) return true;
  return b == a && bi < ai;
}

int threads_for(std::int64_t cols) {
  int threads = 32;
  while (threads < cols && threads < 256) threads *= 2;
  return threads;
}

dim3 grid_for(std::int64_t rows) { return dim3(static_cast<unsigned>(rows < 65535 ? rows : 65535)); }

}  // namespace

template <typename T>
__global__ void reduce_rows_kernel(StridedIter<1> in, StridedIter<1> out, std::int64_t rows, std::int64_t cols,
                                   int op, double correction) {
  __shared__ T scratch[32];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T acc = T(0);
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      std::int64_t off[1];
      operand_offsets(in, row * cols + c, off);
      acc += load_as<T>(in.data[0], in.dtype[0], off[0]);
    }
    const T total = block_sum(acc, scratch);
    T result = op == kSum ? total : total / static_cast<T>(cols);
    if (op == kVar) {
      const T mean = result;
      T squares = T(0);
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        std::int64_t off[1];
        operand_offsets(in, row * cols + c, off);
        const T d = load_as<T>(in.data[0], in.dtype[0], off[0]) - mean;
        squares += d * d;
      }
      squares = block_sum(squares, scratch);
      const double denom = static_cast<double>(cols) - correction;
      result = denom > 0 ? squares / static_cast<T>(denom) : static_cast<T>(NAN);
    }
    if (threadIdx.x == 0) {
      std::int64_t off[1];
      operand_offsets(out, row, off);
      store_as<T>(out.data[0], out.dtype[0], off[0], result);
    }
  }
}

// Stage 1 of a split row: block (slice, row) sums its slice of the row, or
// the squared deviations from the row's mean when `means` is given.
template <typename T>
__global__ void partial_row_sums(StridedIter<1> in, std::int64_t cols, const T* means, T* partials) {
  __shared__ T scratch[32];
  const std::int64_t row = blockIdx.y, slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t per_slice = (cols + slices - 1) / slices;
  const std::int64_t begin = slice * per_slice, end = begin + per_slice < cols ? begin + per_slice : cols;
  const T mean = means != nullptr ? means[row] : T(0);
  T acc = T(0);
  for (std::int64_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
    std::int64_t off[1];
    operand_offsets(in, row * cols + c, off);
    const T v = load_as<T>(in.data[0], in.dtype[0], off[0]);
    acc += means != nullptr ? (v - mean) * (v - mean) : v;
  }
  const T total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[row * slices + slice] = total;
}

// Stage 2: a block per row adds the row's partials in a fixed order and
// writes the result — or, for var's first round, only the row's mean.
template <typename T>
__global__ void finish_split_rows(const T* partials, std::int64_t slices, std::int64_t cols, int op,
                                  double correction, bool squares, T* means, StridedIter<1> out) {
  __shared__ T scratch[32];
  const std::int64_t row = blockIdx.x;
  T acc = T(0);
  for (std::int64_t s = threadIdx.x; s < slices; s += blockDim.x) acc += partials[row * slices + s];
  const T total = block_sum(acc, scratch);
  if (threadIdx.x != 0) return;
  T result = op == kSum ? total : total / static_cast<T>(cols);
  if (op == kVar && !squares) {
    means[row] = result;
    return;
  }
  if (op == kVar) {
    const double denom = static_cast<double>(cols) - correction;
    result = denom > 0 ? total / static_cast<T>(denom) : static_cast<T>(NAN);
  }
  std::int64_t off[1];
  operand_offsets(out, row, off);
  store_as<T>(out.data[0], out.dtype[0], off[0], result);
}

template <typename T>
void reduce_split_rows(int op, const StridedIter<1>& in, const StridedIter<1>& out, std::int64_t rows,
                       std::int64_t cols, double correction, void* workspace, Stream stream) {
  const std::int64_t slices = kernels::reduce_split_chunks(rows, cols);
  T* partials = static_cast<T*>(workspace);
  T* means = partials + rows * slices;
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(rows)), block(256);
  launch("reduce_partial_row_sums", partial_row_sums<T>, grid, block, 0, stream, in, cols,
         static_cast<const T*>(nullptr), partials);
  launch("reduce_finish_split_rows", finish_split_rows<T>, dim3(static_cast<unsigned>(rows)), block, 0, stream,
         static_cast<const T*>(partials), slices, cols, op, correction, false, means, out);
  if (op != kVar) return;
  launch("reduce_partial_row_sums", partial_row_sums<T>, grid, block, 0, stream, in, cols,
         static_cast<const T*>(means), partials);
  launch("reduce_finish_split_rows", finish_split_rows<T>, dim3(static_cast<unsigned>(rows)), block, 0, stream,
         static_cast<const T*>(partials), slices, cols, op, correction, true, means, out);
}

// This thread's best (value, index) pair over columns [begin, end) of `row`, strided by the block.
template <typename T>
__device__ void thread_best(const StridedIter<1>& in, std::int64_t row, std::int64_t cols, std::int64_t begin,
                            std::int64_t end, bool is_max, T& best, std::int64_t& arg) {
  for (std::int64_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
    std::int64_t off[1];
    operand_offsets(in, row * cols + c, off);
    const T v = load_as<T>(in.data[0], in.dtype[0], off[0]);
    if (beats(best, arg, v, c, is_max)) {
      best = v;
      arg = c;
    }
  }
}

// The best (value, index) pair of the whole block, in thread 0 (`best_value`
// and `best_index` hold 32 entries).
template <typename T>
__device__ void block_best(T& best, std::int64_t& arg, bool is_max, T* best_value, std::int64_t* best_index) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  for (int offset = 16; offset > 0; offset /= 2) {
    const T other = __shfl_down_sync(0xffffffffu, best, offset);
    const std::int64_t other_arg = __shfl_down_sync(0xffffffffu, arg, offset);
    if (lane + offset < 32 && beats(best, arg, other, other_arg, is_max)) {
      best = other;
      arg = other_arg;
    }
  }
  if (lane == 0) {
    best_value[warp] = best;
    best_index[warp] = arg;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>(blockDim.x / 32);
    for (int w = 1; w < warps; ++w) {
      if (beats(best, arg, best_value[w], best_index[w], is_max)) {
        best = best_value[w];
        arg = best_index[w];
      }
    }
  }
  __syncthreads();  // the scratch is reused
}

// Writes a row's best value (when values are wanted) and its index.
template <typename T>
__device__ void store_best(const StridedIter<1>& values, const StridedIter<1>& indices, std::int64_t row, T best,
                           std::int64_t arg) {
  std::int64_t off[1];
  if (values.data[0] != nullptr) {
    operand_offsets(values, row, off);
    store_as<T>(values.data[0], values.dtype[0], off[0], best);
  }
  operand_offsets(indices, row, off);
  static_cast<std::int64_t*>(indices.data[0])[off[0]] = arg;
}

// Stage 1 of a split max/min: block (slice, row) writes its slice's best pair.
template <typename T>
__global__ void partial_row_best(StridedIter<1> in, std::int64_t cols, bool is_max, T* values,
                                 std::int64_t* indices) {
  __shared__ T best_value[32];
  __shared__ std::int64_t best_index[32];
  const std::int64_t row = blockIdx.y, slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t per_slice = (cols + slices - 1) / slices;
  const std::int64_t begin = slice * per_slice, end = begin + per_slice < cols ? begin + per_slice : cols;
  T best = T(0);
  std::int64_t arg = -1;
  thread_best(in, row, cols, begin, end, is_max, best, arg);
  block_best(best, arg, is_max, best_value, best_index);
  if (threadIdx.x == 0) {
    values[row * slices + slice] = best;
    indices[row * slices + slice] = arg;
  }
}

// Stage 2: a block per row picks the best of its slices' pairs.
template <typename T>
__global__ void finish_row_best(const T* partial_values, const std::int64_t* partial_indices, std::int64_t slices,
                                bool is_max, StridedIter<1> values, StridedIter<1> indices) {
  __shared__ T best_value[32];
  __shared__ std::int64_t best_index[32];
  const std::int64_t row = blockIdx.x;
  T best = T(0);
  std::int64_t arg = -1;
  for (std::int64_t s = threadIdx.x; s < slices; s += blockDim.x) {
    const T v = partial_values[row * slices + s];
    const std::int64_t i = partial_indices[row * slices + s];
    if (beats(best, arg, v, i, is_max)) {
      best = v;
      arg = i;
    }
  }
  block_best(best, arg, is_max, best_value, best_index);
  if (threadIdx.x == 0) store_best(values, indices, row, best, arg);
}

template <typename T>
__global__ void reduce_with_index_kernel(StridedIter<1> in, StridedIter<1> values, StridedIter<1> indices,
                                         std::int64_t rows, std::int64_t cols, bool is_max) {
  __shared__ T best_value[32];
  __shared__ std::int64_t best_index[32];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T best = T(0);
    std::int64_t arg = -1;
    thread_best(in, row, cols, 0, cols, is_max, best, arg);
    block_best(best, arg, is_max, best_value, best_index);
    if (threadIdx.x == 0) store_best(values, indices, row, best, arg);
  }
}

template <typename T>
void reduce_split_rows_with_index(bool is_max, const StridedIter<1>& in, const StridedIter<1>& values,
                                  const StridedIter<1>& indices, std::int64_t rows, std::int64_t cols,
                                  void* workspace, Stream stream) {
  const std::int64_t slices = kernels::reduce_split_chunks(rows, cols);
  auto* partial_indices = static_cast<std::int64_t*>(workspace);
  auto* partial_values = reinterpret_cast<T*>(partial_indices + rows * slices);
  launch("reduce_partial_row_best", partial_row_best<T>,
         dim3(static_cast<unsigned>(slices), static_cast<unsigned>(rows)), dim3(256), 0, stream, in, cols, is_max,
         partial_values, partial_indices);
  launch("reduce_finish_row_best", finish_row_best<T>, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream,
         static_cast<const T*>(partial_values), static_cast<const std::int64_t*>(partial_indices), slices, is_max,
         values, indices);
}

void reduce_rows(int op, const TensorRef& in, const TensorRef& out, std::int64_t rows, std::int64_t cols,
                 double correction, void* workspace, Stream stream) {
  if (rows == 0) return;
  const TensorRef* in_operands[1] = {&in};
  const TensorRef* out_operands[1] = {&out};
  const auto in_it = make_strided_iter(in_operands);
  const auto out_it = make_strided_iter(out_operands);
  if (kernels::reduce_split_chunks(rows, cols) > 1 && workspace != nullptr) {
    if (kernels::computes_in_double(in.dtype)) {
      return reduce_split_rows<double>(op, in_it, out_it, rows, cols, correction, workspace, stream);
    }
    return reduce_split_rows<float>(op, in_it, out_it, rows, cols, correction, workspace, stream);
  }
  const dim3 block(threads_for(cols));
  if (kernels::computes_in_double(in.dtype)) {
    launch("reduce_rows_kernel", reduce_rows_kernel<double>, grid_for(rows), block, 0, stream, in_it, out_it, rows,
           cols, op, correction);
  } else {
    launch("reduce_rows_kernel", reduce_rows_kernel<float>, grid_for(rows), block, 0, stream, in_it, out_it, rows,
           cols, op, correction);
  }
}

void reduce_rows_with_index(bool is_max, const TensorRef& in, const TensorRef& values, const TensorRef& indices,
                            std::int64_t rows, std::int64_t cols, void* workspace, Stream stream) {
  if (rows == 0) return;
  const TensorRef* in_operands[1] = {&in};
  const TensorRef* value_operands[1] = {&values};
  const TensorRef* index_operands[1] = {&indices};
  const auto in_it = make_strided_iter(in_operands);
  const auto index_it = make_strided_iter(index_operands);
  StridedIter<1> value_it;
  if (values.data != nullptr) value_it = make_strided_iter(value_operands);
  if (kernels::reduce_split_chunks(rows, cols) > 1 && workspace != nullptr) {
    if (kernels::computes_in_double(in.dtype)) {
      return reduce_split_rows_with_index<double>(is_max, in_it, value_it, index_it, rows, cols, workspace, stream);
    }
    return reduce_split_rows_with_index<float>(is_max, in_it, value_it, index_it, rows, cols, workspace, stream);
  }
  const dim3 block(threads_for(cols));
  if (kernels::computes_in_double(in.dtype)) {
    launch("reduce_with_index_kernel", reduce_with_index_kernel<double>, grid_for(rows), block, 0, stream, in_it,
           value_it, index_it, rows, cols, is_max);
  } else {
    launch("reduce_with_index_kernel", reduce_with_index_kernel<float>, grid_for(rows), block, 0, stream, in_it,
           value_it, index_it, rows, cols, is_max);
  }
}

// Running sums (cumsum): one thread per row walks it in order, so each sum
// is the CPU's sequence of additions (in f32 here, f64 there). Rows are
// independent, so a [batch, n] cumsum has batch-way parallelism; one very
// long row runs on one thread, where a block-wide scan (Blelloch) would be
// the next rung.
template <typename T>
__global__ void cumsum_rows_kernel(const void* in, DType in_dtype, void* out, DType out_dtype, std::int64_t rows,
                                   std::int64_t cols, bool reverse) {
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    T running = T(0);
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t at = row * cols + (reverse ? cols - 1 - j : j);
      running += load_as<T>(in, in_dtype, at);
      store_as<T>(out, out_dtype, at, running);
    }
  }
}

void cumsum_rows(const TensorRef& in, const TensorRef& out, std::int64_t rows, std::int64_t cols, bool reverse,
                 Stream stream) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid = elementwise_grid(rows), block(kElementwiseThreads);
  if (kernels::computes_in_double(in.dtype) || kernels::computes_in_double(out.dtype)) {
    launch("cumsum_rows_kernel", cumsum_rows_kernel<double>, grid, block, 0, stream, static_cast<const void*>(in.data),
           in.dtype, out.data, out.dtype, rows, cols, reverse);
  } else {
    launch("cumsum_rows_kernel", cumsum_rows_kernel<float>, grid, block, 0, stream, static_cast<const void*>(in.data),
           in.dtype, out.data, out.dtype, rows, cols, reverse);
  }
}

}  // namespace mt::MT_KERNEL_NS
