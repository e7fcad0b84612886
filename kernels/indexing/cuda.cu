// Index kernels: index_select (embedding forward), index_add (embedding
// backward), gather and scatter_add — all deterministic.
//
// What: moving rows/elements chosen by an i64 index tensor. The dispatcher
// (kernels/indexing/indexing.h) hands every tensor over contiguous, so a tensor along
// `dim` is [outer, mid, inner] and offsets are plain arithmetic.
//
// Algorithm: one thread per output element. index_select copies raw element
// bits (no rounding, any dtype). The two accumulating kernels avoid float
// atomics, whose order (and so whose f32 rounding) changes from run to run:
// each thread owns one output element and adds its sources in index order —
// the CPU's order, so results match it bit for bit.
//   index_add first groups the index list by destination (a counting sort
//   in four small kernels: count per destination, prefix sum, place, then
//   order each destination's positions ascending), so the thread of
//   destination m reads only the positions that land on m: n index reads in
//   all instead of one scan of the list per output element (an embedding
//   backward of 50257 x 768 over 16k tokens was 6e14 index reads, now 16k).
//   The integer atomics of the counting are exact, so their order changes
//   nothing. The ordering step costs the sum over destinations of (hits)^2
//   comparisons: small for token ids, n^2 only when every index is equal.
//   scatter_add walks, per output element, its fiber of the index along dim
//   (index_sizes[dim] reads per output element).
//
// Precision: accumulation in f32 for f32/f16/bf16 (f64 for f64), starting
// from the current output value, rounded once on store.
//
// Bound: memory. Measured speed: not yet measured on a GPU.
//
// Out-of-range indices: the sim dispatcher checks them on the host first (an
// mt::Error like the CPU's); on a GPU the kernel traps (the next CUDA call
// reports an error) instead of reading or writing out of bounds.
#include "runtime/launch.h"

#include "kernels/elementwise/loop.h"
#include "kernels/indexing/api.h"

namespace mt::MT_KERNEL_NS {

namespace {

// [outer, mid, inner] of a contiguous tensor along dim.
struct Split3 {
  std::int64_t outer = 1, mid = 1, inner = 1;
};

Split3 split_at(const TensorRef& t, std::int64_t dim) {
  Split3 s;
  for (int d = 0; d < t.ndim; ++d) {
    if (d < dim) s.outer *= t.sizes[d];
    if (d == dim) s.mid = t.sizes[d];
    if (d > dim) s.inner *= t.sizes[d];
  }
  return s;
}

__device__ __forceinline__ bool index_ok(std::int64_t value, std::int64_t size) {
  if (value >= 0 && value < size) return true;
#if defined(__CUDA_ARCH__)
  __trap();
#endif
  return false;
}

// Sizes of the index tensor and contiguous strides of the indexed tensors, for gather/scatter_add.
struct IndexGeometry {
  std::int32_t ndim = 0;
  std::int32_t dim = 0;
  std::int64_t index_sizes[kMaxDims] = {};
  std::int64_t target_strides[kMaxDims] = {};  // of `in` (gather) / `out` (scatter_add)
  std::int64_t target_sizes[kMaxDims] = {};
  std::int64_t source_strides[kMaxDims] = {};  // of `src` (scatter_add)
};

void contiguous_strides_of(const TensorRef& t, std::int64_t (&strides)[kMaxDims]) {
  std::int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= t.sizes[d] > 1 ? t.sizes[d] : 1;
  }
}

dim3 grid_for(std::int64_t n) { return elementwise_grid(n); }

}  // namespace

template <typename Word>
__global__ void index_select_kernel(const Word* __restrict__ in, const std::int64_t* __restrict__ index,
                                    Word* __restrict__ out, std::int64_t outer, std::int64_t mid, std::int64_t n,
                                    std::int64_t inner) {
  const std::int64_t total = outer * n * inner;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t k = i % inner, j = (i / inner) % n, o = i / (inner * n);
    const std::int64_t row = index[j];
    if (!index_ok(row, mid)) continue;
    out[i] = in[(o * mid + row) * inner + k];
  }
}

// ---- index_add: group the index list by destination, then sum in order.

__global__ void clear_words(unsigned* words, std::int64_t count) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    words[i] = 0u;
  }
}

__global__ void count_destinations(const std::int64_t* __restrict__ index, std::int64_t n, std::int64_t mid,
                                   unsigned* counts) {
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = index[j];
    if (index_ok(row, mid)) atomicAdd(counts + row, 1u);
  }
}

constexpr int kScanThreads = 1024;

// One block: starts[m] = counts[0] + ... + counts[m - 1] for m in [0, mid],
// chunk by chunk (Hillis-Steele within a chunk, a running carry across).
// Each destination's cursor starts where its positions will end.
__global__ void prefix_sum_counts(const unsigned* counts, std::int64_t mid, unsigned* starts, unsigned* cursors) {
  __shared__ unsigned chunk[kScanThreads];
  unsigned carry = 0;
  for (std::int64_t base = 0; base <= mid; base += kScanThreads) {
    const std::int64_t m = base + threadIdx.x;
    const unsigned own = m < mid ? counts[m] : 0u;
    chunk[threadIdx.x] = own;
    __syncthreads();
    for (int offset = 1; offset < kScanThreads; offset *= 2) {
      const unsigned add = threadIdx.x >= static_cast<unsigned>(offset) ? chunk[threadIdx.x - offset] : 0u;
      __syncthreads();
      chunk[threadIdx.x] += add;
      __syncthreads();
    }
    const unsigned inclusive = chunk[threadIdx.x];
    if (m <= mid) {
      starts[m] = carry + inclusive - own;
      if (m < mid) cursors[m] = carry + inclusive;
    }
    carry += chunk[kScanThreads - 1];
    __syncthreads();  // the chunk is reused
  }
}

// Each position j into its destination's range, in whatever order the
// atomics give. The range fills from its end: on the simulator, which runs
// threads in order, the positions then come out reversed, so the ordering
// step below is exercised there too.
__global__ void place_positions(const std::int64_t* __restrict__ index, std::int64_t n, std::int64_t mid,
                                unsigned* cursors, unsigned* unordered) {
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = index[j];
    if (!index_ok(row, mid)) continue;
    unordered[atomicAdd(cursors + row, 0xffffffffu) - 1u] = static_cast<unsigned>(j);  // atomicAdd of -1
  }
}

// positions[starts[m] + r] = the r-th smallest position landing on m: each
// entry counts the entries of its destination below it.
__global__ void order_positions(const std::int64_t* __restrict__ index, const unsigned* starts,
                                const unsigned* unordered, std::int64_t n, unsigned* positions) {
  for (std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < n;
       s += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const unsigned j = unordered[s];
    const std::int64_t m = index[j];
    const unsigned begin = starts[m], end = starts[m + 1];
    unsigned rank = 0;
    for (unsigned t = begin; t < end; ++t) rank += unordered[t] < j ? 1u : 0u;
    positions[begin + rank] = j;
  }
}

template <typename T>
__global__ void index_add_kernel(void* out, DType out_dtype, const unsigned* __restrict__ starts,
                                 const unsigned* __restrict__ positions, const void* src, DType src_dtype,
                                 std::int64_t outer, std::int64_t mid, std::int64_t n, std::int64_t inner) {
  const std::int64_t total = outer * mid * inner;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t k = i % inner, m = (i / inner) % mid, o = i / (inner * mid);
    T acc = load_as<T>(out, out_dtype, i);
    for (unsigned s = starts[m]; s < starts[m + 1]; ++s) {
      acc += load_as<T>(src, src_dtype, (o * n + positions[s]) * inner + k);
    }
    store_as<T>(out, out_dtype, i, acc);
  }
}

template <typename T>
__global__ void gather_kernel(const void* in, DType in_dtype, std::int64_t in_dim_size,
                              const std::int64_t* __restrict__ index, void* out, DType out_dtype,
                              std::int64_t total, IndexGeometry g) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t rem = i, pos = 0;
    bool ok = true;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const std::int64_t coord = rem % g.index_sizes[d];
      rem /= g.index_sizes[d];
      if (d == g.dim) {
        ok = index_ok(index[i], in_dim_size);
        pos += index[i] * g.target_strides[d];
      } else {
        pos += coord * g.target_strides[d];
      }
    }
    if (ok) store_as<T>(out, out_dtype, i, load_as<T>(in, in_dtype, pos));
  }
}

// One thread per element of `out`: the index elements that can land on it
// share its coordinates except along dim; walk them in order.
template <typename T>
__global__ void scatter_add_kernel(void* out, DType out_dtype, std::int64_t out_numel,
                                   const std::int64_t* __restrict__ index, const void* src, DType src_dtype,
                                   IndexGeometry g) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < out_numel;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t coord[kMaxDims];
    std::int64_t rem = i;
    bool reachable = true;
    for (int d = g.ndim - 1; d >= 0; --d) {
      coord[d] = rem % g.target_sizes[d];
      rem /= g.target_sizes[d];
      if (d != g.dim && coord[d] >= g.index_sizes[d]) reachable = false;
    }
    if (!reachable) continue;
    T acc = load_as<T>(out, out_dtype, i);
    std::int64_t index_pos = 0, src_pos = 0, index_stride = 1;
    // Contiguous strides of the index tensor, and the base offsets with coord[dim] = 0.
    std::int64_t stride = 1;
    for (int d = g.ndim - 1; d >= 0; --d) {
      if (d == g.dim) {
        index_stride = stride;
      } else {
        index_pos += coord[d] * stride;
        src_pos += coord[d] * g.source_strides[d];
      }
      stride *= g.index_sizes[d];
    }
    const std::int64_t target = coord[g.dim];
    for (std::int64_t j = 0; j < g.index_sizes[g.dim]; ++j) {
      const std::int64_t value = index[index_pos + j * index_stride];
      if (!index_ok(value, g.target_sizes[g.dim])) continue;
      if (value == target) acc += load_as<T>(src, src_dtype, src_pos + j * g.source_strides[g.dim]);
    }
    store_as<T>(out, out_dtype, i, acc);
  }
}

void index_select(const TensorRef& in, std::int64_t dim, const TensorRef& index, const TensorRef& out,
                  Stream stream) {
  if (out.numel == 0) return;
  const Split3 s = split_at(in, dim);
  const auto* idx = static_cast<const std::int64_t*>(index.data);
  const std::int64_t n = index.numel;
  const dim3 grid = grid_for(out.numel), block(kElementwiseThreads);
  switch (kernels::element_bytes(in.dtype)) {
    case 1:
      return launch("index_select_kernel", index_select_kernel<std::uint8_t>, grid, block, 0, stream,
                    static_cast<const std::uint8_t*>(in.data), idx, static_cast<std::uint8_t*>(out.data), s.outer,
                    s.mid, n, s.inner);
    case 2:
      return launch("index_select_kernel", index_select_kernel<std::uint16_t>, grid, block, 0, stream,
                    static_cast<const std::uint16_t*>(in.data), idx, static_cast<std::uint16_t*>(out.data), s.outer,
                    s.mid, n, s.inner);
    case 4:
      return launch("index_select_kernel", index_select_kernel<std::uint32_t>, grid, block, 0, stream,
                    static_cast<const std::uint32_t*>(in.data), idx, static_cast<std::uint32_t*>(out.data), s.outer,
                    s.mid, n, s.inner);
    default:
      return launch("index_select_kernel", index_select_kernel<std::uint64_t>, grid, block, 0, stream,
                    static_cast<const std::uint64_t*>(in.data), idx, static_cast<std::uint64_t*>(out.data), s.outer,
                    s.mid, n, s.inner);
  }
}

void index_add(const TensorRef& out, std::int64_t dim, const TensorRef& index, const TensorRef& src, void* workspace,
               Stream stream) {
  if (out.numel == 0) return;
  const Split3 s = split_at(out, dim);
  const auto* idx = static_cast<const std::int64_t*>(index.data);
  const std::int64_t n = index.numel;
  // The workspace (kernels::index_add_workspace_bytes): counts and starts
  // [mid + 1], cursors [mid], unordered and ordered positions [n].
  auto* counts = static_cast<unsigned*>(workspace);
  unsigned* starts = counts + (s.mid + 1);
  unsigned* cursors = starts + (s.mid + 1);
  unsigned* unordered = cursors + s.mid;
  unsigned* positions = unordered + n;
  launch("index_add_clear_counts", clear_words, grid_for(s.mid), dim3(kElementwiseThreads), 0, stream, counts, s.mid);
  if (n > 0) {
    launch("index_add_count_destinations", count_destinations, grid_for(n), dim3(kElementwiseThreads), 0, stream, idx,
           n, s.mid, counts);
  }
  launch("index_add_prefix_sum", prefix_sum_counts, dim3(1), dim3(kScanThreads), 0, stream,
         static_cast<const unsigned*>(counts), s.mid, starts, cursors);
  if (n > 0) {
    launch("index_add_place_positions", place_positions, grid_for(n), dim3(kElementwiseThreads), 0, stream, idx, n,
           s.mid, cursors, unordered);
    launch("index_add_order_positions", order_positions, grid_for(n), dim3(kElementwiseThreads), 0, stream, idx,
           static_cast<const unsigned*>(starts), static_cast<const unsigned*>(unordered), n, positions);
  }
  const dim3 grid = grid_for(out.numel), block(kElementwiseThreads);
  const auto* sorted = static_cast<const unsigned*>(positions);
  const auto* first = static_cast<const unsigned*>(starts);
  if (kernels::computes_in_double(out.dtype)) {
    launch("index_add_kernel", index_add_kernel<double>, grid, block, 0, stream, out.data, out.dtype, first, sorted,
           static_cast<const void*>(src.data), src.dtype, s.outer, s.mid, n, s.inner);
  } else {
    launch("index_add_kernel", index_add_kernel<float>, grid, block, 0, stream, out.data, out.dtype, first, sorted,
           static_cast<const void*>(src.data), src.dtype, s.outer, s.mid, n, s.inner);
  }
}

void gather(const TensorRef& in, std::int64_t dim, const TensorRef& index, const TensorRef& out, Stream stream) {
  if (out.numel == 0) return;
  IndexGeometry g;
  g.ndim = index.ndim;
  g.dim = static_cast<std::int32_t>(dim);
  for (int d = 0; d < index.ndim; ++d) g.index_sizes[d] = index.sizes[d];
  contiguous_strides_of(in, g.target_strides);
  const auto* idx = static_cast<const std::int64_t*>(index.data);
  const dim3 grid = grid_for(out.numel), block(kElementwiseThreads);
  if (kernels::computes_in_double(in.dtype)) {
    launch("gather_kernel", gather_kernel<double>, grid, block, 0, stream, static_cast<const void*>(in.data), in.dtype,
           in.sizes[dim], idx, out.data, out.dtype, out.numel, g);
  } else {
    launch("gather_kernel", gather_kernel<float>, grid, block, 0, stream, static_cast<const void*>(in.data), in.dtype,
           in.sizes[dim], idx, out.data, out.dtype, out.numel, g);
  }
}

void scatter_add(const TensorRef& out, std::int64_t dim, const TensorRef& index, const TensorRef& src,
                 Stream stream) {
  if (out.numel == 0 || index.numel == 0) return;
  IndexGeometry g;
  g.ndim = out.ndim;
  g.dim = static_cast<std::int32_t>(dim);
  for (int d = 0; d < out.ndim; ++d) {
    g.index_sizes[d] = index.sizes[d];
    g.target_sizes[d] = out.sizes[d];
  }
  contiguous_strides_of(out, g.target_strides);
  contiguous_strides_of(src, g.source_strides);
  const auto* idx = static_cast<const std::int64_t*>(index.data);
  const dim3 grid = grid_for(out.numel), block(kElementwiseThreads);
  if (kernels::computes_in_double(out.dtype)) {
    launch("scatter_add_kernel", scatter_add_kernel<double>, grid, block, 0, stream, out.data, out.dtype, out.numel,
           idx, static_cast<const void*>(src.data), src.dtype, g);
  } else {
    launch("scatter_add_kernel", scatter_add_kernel<float>, grid, block, 0, stream, out.data, out.dtype, out.numel,
           idx, static_cast<const void*>(src.data), src.dtype, g);
  }
}

}  // namespace mt::MT_KERNEL_NS
