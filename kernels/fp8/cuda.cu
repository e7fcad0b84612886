// FP8 quantization kernels: amax, scale, quantize (per tensor, or per group
// with its own scale) and dequantize.
//
// What: FP8 training keeps each GEMM operand as FP8 bytes plus FP32 scales.
// fp8_quantize_with_scale writes fp8(x * scale) for a scale already on the
// device (delayed scaling: the amax history made it) and takes this pass's
// amax at the same time, so the tensor is read once; fp8_delayed_update then
// turns the history into the next scale and rolls it (one thread).
// fp8_quantize_grouped is current scaling: every group (the whole tensor, a
// row, a 1x128 tile, a 128x128 block: DeepSeek-V3's layouts) gets its own
// scale from its own amax, one block per group reading the group twice (the
// amax, then the cast); one group of 64K elements or more (per-tensor
// scaling of a real activation) is read by the whole grid instead, in two
// passes. fp8_gemm_combine is the FP8 GEMM's scaling step.
//
// Algorithm: grid-stride loops; amax is a max over |x| taken as integer bits
// (kernels/fp8/math.h: the order of non-negative floats), reduced in each
// warp with shuffles and across blocks with one atomicMax per warp. A max is
// the same in any order, so the result does not depend on the launch shape.
//
// Precision: x is read in its own dtype and widened to f32; x * scale is one
// f32 multiply, rounded once into FP8 with the GPU's satfinite rule
// (runtime/fp8.h: the same code the CPU runs; the hardware cvt,
// ptx::cvt_fp8x2, is checked against it on a GPU by the example tests). Dequantize multiplies in f32
// and rounds once into the output dtype. Scales and amax stay f32.
//
// Bound: memory bandwidth (read 2-4 bytes, write 1 per element; the grouped
// kernel reads each group twice, from L1/L2 the second time). Measured
// speed: not yet measured on a GPU.
#include "kernels/elementwise/loop.h"
#include "kernels/fp8/api.h"
#include "kernels/fp8/math.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {

namespace {

constexpr int kFp8Threads = 256;
constexpr int kGroupThreads = 128;
// From this many elements one group (a whole tensor) is quantized by the
// whole grid rather than one block.
constexpr std::int64_t kWholeGridElements = std::int64_t{1} << 16;

__device__ __forceinline__ unsigned warp_max_bits(unsigned v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// The block's max of `v` for every thread; every thread must call it.
__device__ unsigned block_max_bits(unsigned v, unsigned* scratch) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  v = warp_max_bits(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned m = lane < warps ? scratch[lane] : 0u;
    m = warp_max_bits(m);
    if (lane == 0) scratch[0] = m;
  }
  __syncthreads();
  const unsigned result = scratch[0];
  __syncthreads();
  return result;
}

// Folds a thread's max |x| bits into *amax: a warp max, then one atomic per warp.
__device__ __forceinline__ void fold_amax(float* amax, unsigned bits) {
  bits = warp_max_bits(bits);
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<unsigned*>(amax), bits);
}

dim3 grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kFp8Threads - 1) / kFp8Threads;
  return dim3(static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks)));
}

}  // namespace

__global__ void fp8_amax_kernel(TensorRef x, float* amax) {
  unsigned local = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < x.numel; i += step) {
    const unsigned bits = kernels::fp8_abs_bits(load_as<float>(x.data, x.dtype, i));
    local = bits > local ? bits : local;
  }
  fold_amax(amax, local);
}

__global__ void fp8_delayed_update_kernel(float* history, std::int64_t length, bool most_recent,
                                          kernels::Fp8ScaleRule rule, float* scale, float* scale_inv) {
  kernels::fp8_delayed_step(history, length, most_recent, rule, scale, scale_inv);
}

__global__ void fp8_quantize_with_scale_kernel(TensorRef x, const float* scale, TensorRef out, float* amax) {
  const float s = *scale;
  auto* q = static_cast<std::uint8_t*>(out.data);
  unsigned local = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < x.numel; i += step) {
    const float v = load_as<float>(x.data, x.dtype, i);
    const unsigned bits = kernels::fp8_abs_bits(v);
    local = bits > local ? bits : local;
    q[i] = kernels::fp8_quantize_value(v, s, out.dtype);
  }
  if (amax != nullptr) fold_amax(amax, local);
}

// One block per group: the group's amax, its scale, then the cast.
__global__ void fp8_quantize_grouped_kernel(TensorRef x, kernels::Fp8Groups groups, kernels::Fp8ScaleRule rule,
                                            TensorRef out, float* scale_inv) {
  __shared__ unsigned scratch[32];
  const std::int64_t group = blockIdx.x;
  const std::int64_t row0 = (group / groups.group_columns()) * groups.group_rows;
  const std::int64_t col0 = (group % groups.group_columns()) * groups.group_cols;
  // Groups at the bottom and right edges are ragged.
  const std::int64_t height = groups.rows - row0 < groups.group_rows ? groups.rows - row0 : groups.group_rows;
  const std::int64_t width = groups.cols - col0 < groups.group_cols ? groups.cols - col0 : groups.group_cols;
  const std::int64_t count = height * width;
  unsigned local = 0;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const std::int64_t index = (row0 + i / width) * groups.cols + col0 + i % width;
    const unsigned bits = kernels::fp8_abs_bits(load_as<float>(x.data, x.dtype, index));
    local = bits > local ? bits : local;
  }
  const float amax = __uint_as_float(block_max_bits(local, scratch));
  const float scale = kernels::fp8_current_scale(amax, rule);
  if (threadIdx.x == 0) scale_inv[group] = 1.0f / scale;
  auto* q = static_cast<std::uint8_t*>(out.data);
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const std::int64_t index = (row0 + i / width) * groups.cols + col0 + i % width;
    q[index] = kernels::fp8_quantize_value(load_as<float>(x.data, x.dtype, index), scale, out.dtype);
  }
}

// The cast that also writes the transpose: a block moves a 32 x 32 tile,
// 32 x 8 threads, each four rows; the tile's bytes go out row-major as they
// are cast and, through shared memory (a padded row against bank
// conflicts), column-major into out_t, so both writes are coalesced.
constexpr int kTransposeTile = 32, kTransposeRows = 8;

__global__ void fp8_quantize_transpose_kernel(TensorRef x, const float* scale, TensorRef out, TensorRef out_t,
                                              float* amax) {
  __shared__ std::uint8_t tile[kTransposeTile][kTransposeTile + 1];
  const std::int64_t rows = x.sizes[0], cols = x.sizes[1];
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kTransposeTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kTransposeTile;
  const float s = *scale;
  auto* q = static_cast<std::uint8_t*>(out.data);
  auto* qt = static_cast<std::uint8_t*>(out_t.data);
  unsigned local = 0;
  for (int r = static_cast<int>(threadIdx.y); r < kTransposeTile; r += kTransposeRows) {
    const std::int64_t row = row0 + r, col = col0 + threadIdx.x;
    if (row < rows && col < cols) {
      const float v = load_as<float>(x.data, x.dtype, row * cols + col);
      const unsigned bits = kernels::fp8_abs_bits(v);
      local = bits > local ? bits : local;
      const std::uint8_t byte = kernels::fp8_quantize_value(v, s, out.dtype);
      q[row * cols + col] = byte;
      tile[r][threadIdx.x] = byte;
    }
  }
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.y); c < kTransposeTile; c += kTransposeRows) {
    const std::int64_t col = col0 + c, row = row0 + threadIdx.x;
    if (row < rows && col < cols) qt[col * rows + row] = tile[threadIdx.x][c];
  }
  if (amax != nullptr) fold_amax(amax, local);
}

__global__ void fp8_scale_from_amax_kernel(const float* amax, kernels::Fp8ScaleRule rule, float* scale,
                                           float* scale_inv) {
  const float s = kernels::fp8_current_scale(*amax, rule);
  *scale = s;
  *scale_inv = 1.0f / s;
}

// Per-tensor current scaling of a large tensor (below): every block derives
// the scale from the amax the previous pass left in scale_inv's slot.
__global__ void fp8_zero_kernel(float* value) { *value = 0.0f; }

__global__ void fp8_quantize_from_amax_kernel(TensorRef x, const float* amax, kernels::Fp8ScaleRule rule,
                                              TensorRef out) {
  const float scale = kernels::fp8_current_scale(*amax, rule);
  auto* q = static_cast<std::uint8_t*>(out.data);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < x.numel; i += step) {
    q[i] = kernels::fp8_quantize_value(load_as<float>(x.data, x.dtype, i), scale, out.dtype);
  }
}

// Last: the amax in the slot becomes the scale's inverse (one thread).
__global__ void fp8_scale_inv_from_amax_kernel(float* slot, kernels::Fp8ScaleRule rule) {
  *slot = 1.0f / kernels::fp8_current_scale(*slot, rule);
}

__global__ void fp8_dequantize_kernel(TensorRef q, const float* scale_inv, kernels::Fp8Groups groups, TensorRef out) {
  const auto* bytes = static_cast<const std::uint8_t*>(q.data);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < q.numel; i += step) {
    const std::int64_t group = kernels::fp8_group_of(groups, i / groups.cols, i % groups.cols);
    store_as<float>(out.data, out.dtype, i, kernels::fp8_dequantize_value(bytes[i], scale_inv[group], q.dtype));
  }
}

__global__ void fp8_gemm_combine_kernel(const float* product, std::int64_t k_groups, std::int64_t k_group,
                                        const float* a_scale_inv, kernels::Fp8Groups a_groups, const float* b_scale_inv,
                                        kernels::Fp8Groups b_groups, const float* bias, TensorRef out) {
  const std::int64_t n_cols = out.sizes[1];
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < out.numel; i += step) {
    const std::int64_t m = i / n_cols, n = i % n_cols;
    float v = kernels::fp8_combine_element(product + i, out.numel, k_groups, k_group, a_scale_inv, a_groups, m,
                                           b_scale_inv, b_groups, n);
    if (bias != nullptr) v += bias[n];
    store_as<float>(out.data, out.dtype, i, v);
  }
}

__global__ void fp8_count_kernel(TensorRef q, TensorRef x, const float* scale_inv, kernels::Fp8Groups groups,
                                 float* counts) {
  const auto* bytes = static_cast<const std::uint8_t*>(q.data);
  unsigned saturated = 0, flushed = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < q.numel; i += step) {
    const float v = load_as<float>(x.data, x.dtype, i);
    const float inv = scale_inv[kernels::fp8_group_of(groups, i / groups.cols, i % groups.cols)];
    saturated += kernels::fp8_saturated(v, inv, q.dtype) ? 1u : 0u;
    flushed += kernels::fp8_flushed(bytes[i], v) ? 1u : 0u;
  }
  if (saturated > 0) atomicAdd(&counts[0], static_cast<float>(saturated));
  if (flushed > 0) atomicAdd(&counts[1], static_cast<float>(flushed));
}

// ---- host entry points -----------------------------------------------------------------

void fp8_amax(const TensorRef& x, float* amax, Stream stream) {
  if (x.numel == 0) return;
  kernels::declare_launch_work(kernels::distinct_bytes(x));
  launch("fp8_amax_kernel", fp8_amax_kernel, grid_for(x.numel), dim3(kFp8Threads), 0, stream, x, amax);
}

void fp8_delayed_update(float* history, std::int64_t length, bool most_recent, kernels::Fp8ScaleRule rule, float* scale,
                        float* scale_inv, Stream stream) {
  launch("fp8_delayed_update_kernel", fp8_delayed_update_kernel, dim3(1), dim3(1), 0, stream, history, length,
         most_recent, rule, scale, scale_inv);
}

void fp8_scale_from_amax(const float* amax, kernels::Fp8ScaleRule rule, float* scale, float* scale_inv, Stream stream) {
  launch("fp8_scale_from_amax_kernel", fp8_scale_from_amax_kernel, dim3(1), dim3(1), 0, stream, amax, rule, scale,
         scale_inv);
}

void fp8_quantize_with_scale(const TensorRef& x, const float* scale, const TensorRef& out, const TensorRef& out_t,
                             float* amax, Stream stream) {
  if (x.numel == 0) return;
  if (out_t.data != nullptr) {
    kernels::declare_launch_work(kernels::distinct_bytes(x) + 2 * kernels::distinct_bytes(out));
    const dim3 grid(static_cast<unsigned>((x.sizes[1] + kTransposeTile - 1) / kTransposeTile),
                    static_cast<unsigned>((x.sizes[0] + kTransposeTile - 1) / kTransposeTile));
    launch("fp8_quantize_transpose_kernel", fp8_quantize_transpose_kernel, grid, dim3(kTransposeTile, kTransposeRows),
           0, stream, x, scale, out, out_t, amax);
    return;
  }
  kernels::declare_launch_work(kernels::distinct_bytes(x) + kernels::distinct_bytes(out));
  launch("fp8_quantize_with_scale_kernel", fp8_quantize_with_scale_kernel, grid_for(x.numel), dim3(kFp8Threads), 0,
         stream, x, scale, out, amax);
}

void fp8_quantize_grouped(const TensorRef& x, kernels::Fp8Groups groups, kernels::Fp8ScaleRule rule,
                          const TensorRef& out, float* scale_inv, Stream stream) {
  if (groups.count() == 0) return;
  if (groups.count() == 1 && x.numel >= kWholeGridElements) {
    // One group is the whole tensor (per-tensor current scaling): one block
    // would read all of it alone, so a large tensor takes grid-wide passes
    // instead: the amax (into scale_inv's slot), the cast with the scale each
    // block derives from it, then scale_inv. The same amax, scale and bytes
    // as the one-block kernel.
    launch("fp8_zero_kernel", fp8_zero_kernel, dim3(1), dim3(1), 0, stream, scale_inv);
    kernels::declare_launch_work(kernels::distinct_bytes(x));
    launch("fp8_amax_kernel", fp8_amax_kernel, grid_for(x.numel), dim3(kFp8Threads), 0, stream, x, scale_inv);
    kernels::declare_launch_work(kernels::distinct_bytes(x) + kernels::distinct_bytes(out));
    launch("fp8_quantize_from_amax_kernel", fp8_quantize_from_amax_kernel, grid_for(x.numel), dim3(kFp8Threads), 0,
           stream, x, scale_inv, rule, out);
    launch("fp8_scale_inv_from_amax_kernel", fp8_scale_inv_from_amax_kernel, dim3(1), dim3(1), 0, stream, scale_inv,
           rule);
    return;
  }
  kernels::declare_launch_work(kernels::distinct_bytes(x) + kernels::distinct_bytes(out));
  launch("fp8_quantize_grouped_kernel", fp8_quantize_grouped_kernel, dim3(static_cast<unsigned>(groups.count())),
         dim3(kGroupThreads), 0, stream, x, groups, rule, out, scale_inv);
}

void fp8_dequantize(const TensorRef& q, const float* scale_inv, kernels::Fp8Groups groups, const TensorRef& out,
                    Stream stream) {
  if (q.numel == 0) return;
  kernels::declare_launch_work(kernels::distinct_bytes(q) + kernels::distinct_bytes(out));
  launch("fp8_dequantize_kernel", fp8_dequantize_kernel, grid_for(q.numel), dim3(kFp8Threads), 0, stream, q, scale_inv,
         groups, out);
}

void fp8_gemm_combine(const float* product, std::int64_t k_groups, std::int64_t k_group, const float* a_scale_inv,
                      kernels::Fp8Groups a_groups, const float* b_scale_inv, kernels::Fp8Groups b_groups,
                      const float* bias, const TensorRef& out, Stream stream) {
  if (out.numel == 0) return;
  // The f32 partial products of every K group, and out.
  kernels::declare_launch_work(static_cast<double>(out.numel) * static_cast<double>(k_groups) * sizeof(float) +
                               kernels::distinct_bytes(out));
  launch("fp8_gemm_combine_kernel", fp8_gemm_combine_kernel, grid_for(out.numel), dim3(kFp8Threads), 0, stream, product,
         k_groups, k_group, a_scale_inv, a_groups, b_scale_inv, b_groups, bias, out);
}

void fp8_count_saturated_and_flushed(const TensorRef& q, const TensorRef& x, const float* scale_inv,
                                     kernels::Fp8Groups groups, float* counts, Stream stream) {
  if (q.numel == 0) return;
  kernels::declare_launch_work(kernels::distinct_bytes(q) + kernels::distinct_bytes(x));
  launch("fp8_count_kernel", fp8_count_kernel, grid_for(q.numel), dim3(kFp8Threads), 0, stream, q, x, scale_inv, groups,
         counts);
}

}  // namespace mt::MT_KERNEL_NS
