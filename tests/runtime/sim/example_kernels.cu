// Three small kernels that show the patterns mixtape's real kernels use, and
// run identically under nvcc and on the simulator:
//
//   block_sum     shared-memory tree + warp-shuffle reduction, atomicAdd
//   transpose     coalesced tiled transpose; the +1 column avoids bank conflicts
//   mma_gemm_f16  one warp per 16x8 tile: cp.async -> shared, ldmatrix -> mma.sync
//   bulk_copy_scale  Hopper's copy engine: one thread arms an mbarrier with the
//                 bytes to expect and issues cp.async.bulk; every thread waits
//                 on the barrier's phase, then reads shared memory
//   tma_wgmma_tile Hopper's Tensor Core path: two TMA boxes (128-byte
//                 swizzle) on one mbarrier, then a warpgroup's wgmma
//                 m64n64k16 x 4 reading them through matrix descriptors
//   fp8_wgmma_gemm the FP8 form (m64n64k32, both operands K-major) over a
//                 long K, with or without promotion every 128 of K
//   fp8_convert_pairs  cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32
#include "runtime/launch.h"
#include "kernels/common/ptx_hopper.h"
#include "kernels/common/tensor_map.h"
#include "tests/runtime/sim/example_kernels.h"

namespace mt::MT_KERNEL_NS {

// ---- block_sum --------------------------------------------------------------------------

constexpr int kSumThreads = 256;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void __launch_bounds__(kSumThreads) block_sum_kernel(const float* __restrict__ in, float* out, int n) {
  __shared__ float partial[kSumThreads];
  const int t = static_cast<int>(threadIdx.x);
  float value = 0.0f;
  for (int i = static_cast<int>(blockIdx.x) * kSumThreads + t; i < n; i += kSumThreads * static_cast<int>(gridDim.x)) {
    value += __ldg(in + i);
  }
  partial[t] = value;
  __syncthreads();
  // Halve the active range until one warp is left, then finish with shuffles.
  for (int stride = kSumThreads / 2; stride >= 32; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t < 32) {
    const float total = warp_sum(partial[t]);
    if (t == 0) atomicAdd(out, total);
  }
}

void block_sum(const float* in, float* out, int n, Stream stream) {
  const int blocks = n <= 0 ? 1 : (n + kSumThreads - 1) / kSumThreads < 64 ? (n + kSumThreads - 1) / kSumThreads : 64;
  launch("block_sum_kernel", block_sum_kernel, dim3(blocks), dim3(kSumThreads), 0, stream, in, out, n);
}

// ---- transpose ------------------------------------------------------------------------------

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;

__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];  // +1: column reads hit 32 different banks
  const int x = static_cast<int>(blockIdx.x) * kTile + static_cast<int>(threadIdx.x);
  const int y0 = static_cast<int>(blockIdx.y) * kTile;
  for (int dy = static_cast<int>(threadIdx.y); dy < kTile; dy += kRowsPerPass) {
    if (x < cols && y0 + dy < rows) tile[dy][threadIdx.x] = in[(y0 + dy) * cols + x];
  }
  __syncthreads();
  const int out_x = y0 + static_cast<int>(threadIdx.x);  // column of `out` = row of `in`
  const int out_y0 = static_cast<int>(blockIdx.x) * kTile;
  for (int dy = static_cast<int>(threadIdx.y); dy < kTile; dy += kRowsPerPass) {
    if (out_x < rows && out_y0 + dy < cols) out[(out_y0 + dy) * rows + out_x] = tile[threadIdx.x][dy];
  }
}

void transpose(const float* in, float* out, int rows, int cols, Stream stream) {
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  launch("transpose_kernel", transpose_kernel, grid, dim3(kTile, kRowsPerPass), 0, stream, in, out, rows, cols);
}

// ---- bulk_copy_scale (sm_90) ------------------------------------------------------------------

constexpr int kBulkTile = 256;  // floats per tile (1 KiB), one per thread

__global__ void __launch_bounds__(kBulkTile) bulk_copy_scale_kernel(const float* in, float* out, float factor) {
  __shared__ __align__(16) float tile[kBulkTile];
  __shared__ __align__(8) std::uint64_t barrier;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) ptx::mbarrier_init(&barrier, 1);  // one arrival per phase: thread 0's
  __syncthreads();
  for (int round = 0; round < 2; ++round) {
    const std::int64_t base = (static_cast<std::int64_t>(blockIdx.x) * 2 + round) * kBulkTile;
    if (t == 0) {
      ptx::mbarrier_arrive_expect_tx(&barrier, kBulkTile * sizeof(float));
      ptx::bulk_copy_global_to_shared(tile, in + base, kBulkTile * sizeof(float), &barrier);
    }
    ptx::mbarrier_wait(&barrier, round & 1);  // phase 0, then phase 1
    out[base + t] = tile[t] * factor;
    __syncthreads();  // every read of this tile is done before the next copy overwrites it
  }
}

void bulk_copy_scale(const float* in, float* out, float factor, int tiles, Stream stream) {
  launch("bulk_copy_scale_kernel", bulk_copy_scale_kernel, dim3(static_cast<unsigned>(tiles / 2)), dim3(kBulkTile), 0,
         stream, in, out, factor);
}

// ---- tma_wgmma_tile (sm_90a) ----------------------------------------------------------------

constexpr int kWgTile = 64;  // A, B and C are 64 x 64

// A warpgroup's m64n64 accumulators (ptx_hopper.h's fragment) into c, 64 x 64 row-major.
__device__ __forceinline__ void store_m64n64(const float (&acc)[32], float* c) {
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned i = 0; i < 8; ++i) {
    for (unsigned r = 0; r < 4; ++r) {
      const unsigned row = 16 * warp + lane / 4 + (r >= 2 ? 8 : 0), col = 8 * i + 2 * (lane % 4) + (r & 1u);
      c[row * kWgTile + col] = acc[4 * i + r];
    }
  }
}

// A (m x k, row-major) is K-major for wgmma; B (k x n, row-major) N-major.
// Each lands as 64 rows of 128 bytes, chunk c of row r at chunk c ^ (r % 8).
__global__ void __launch_bounds__(128)
    tma_wgmma_tile_kernel(const __grid_constant__ kernels::TensorMap map_a,
                          const __grid_constant__ kernels::TensorMap map_b, float* c, std::uint16_t* a_shared) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  // The 128-byte swizzle repeats every 1024 bytes; TMA and wgmma agree on it from a 1024-byte boundary.
  auto* a_tile =
      reinterpret_cast<std::uint16_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  std::uint16_t* b_tile = a_tile + kWgTile * kWgTile;
  auto* barrier = reinterpret_cast<std::uint64_t*>(b_tile + kWgTile * kWgTile);
  const unsigned t = threadIdx.x;
  if (t == 0) ptx::mbarrier_init(barrier, 1);
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(barrier, 2 * kWgTile * kWgTile * sizeof(std::uint16_t));
    ptx::tensor_copy_2d(a_tile, &map_a, 0, 0, barrier);
    ptx::tensor_copy_2d(b_tile, &map_b, 0, 0, barrier);
  }
  ptx::mbarrier_wait(barrier, 0);
  float acc[32];
  ptx::wgmma_fence();
  for (int kk = 0; kk < kWgTile / 16; ++kk) {
    // K-major A: the k16 step is 32 bytes along the rows; 8-row groups 1024 bytes apart.
    const std::uint64_t desc_a = ptx::matrix_descriptor(a_tile + kk * 16, 16, 1024, ptx::Swizzle::B128);
    // N-major B: the k16 step is 16 rows of 128 bytes; 8-row groups 1024 apart (64 n: no second box).
    const std::uint64_t desc_b = ptx::matrix_descriptor(b_tile + kk * 16 * kWgTile, 8192, 1024, ptx::Swizzle::B128);
    ptx::wgmma_m64k16<64, false, false, true>(acc, desc_a, desc_b, kk > 0);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  store_m64n64(acc, c);
  for (unsigned i = t; i < kWgTile * kWgTile; i += blockDim.x) a_shared[i] = a_tile[i];
}

void tma_wgmma_tile(const std::uint16_t* a, const std::uint16_t* b, float* c, std::uint16_t* a_shared, Stream stream) {
  kernels::TensorMapSpec spec;
  spec.dtype = kernels::KernelDType::F16;
  spec.rank = 2;
  spec.dims[0] = spec.dims[1] = kWgTile;
  spec.strides[1] = kWgTile;
  spec.box[0] = spec.box[1] = kWgTile;
  spec.swizzle_bytes = 128;
  kernels::TensorMap map_a{}, map_b{};
  spec.address = a;
  encode_tensor_map(map_a, spec);
  spec.address = b;
  encode_tensor_map(map_b, spec);
  const std::size_t shared = 2 * kWgTile * kWgTile * sizeof(std::uint16_t) + sizeof(std::uint64_t) + 1024;
  launch("tma_wgmma_tile_kernel", tma_wgmma_tile_kernel, dim3(1), dim3(128), shared, stream, map_a, map_b, c, a_shared);
}

// ---- fp8_wgmma_gemm (sm_90a) ----------------------------------------------------------------

constexpr int kFp8Slice = 128;  // K per TMA slice: one 128-byte row of each operand

// A slice of A and of B, 64 rows x 128 bytes each, swizzled by 128 bytes;
// 4 k32 steps of 32 bytes along the rows, 8-row groups 1024 bytes apart.
__global__ void __launch_bounds__(128)
    fp8_wgmma_gemm_kernel(const __grid_constant__ kernels::TensorMap map_a,
                          const __grid_constant__ kernels::TensorMap map_b, float* c, int k, bool promote) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  auto* a_tile =
      reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  std::uint8_t* b_tile = a_tile + kWgTile * kFp8Slice;
  auto* barrier = reinterpret_cast<std::uint64_t*>(b_tile + kWgTile * kFp8Slice);
  const unsigned t = threadIdx.x;
  if (t == 0) ptx::mbarrier_init(barrier, 1);
  __syncthreads();
  float acc[32], partial[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  for (int slice = 0; slice < k / kFp8Slice; ++slice) {
    if (t == 0) {
      ptx::mbarrier_arrive_expect_tx(barrier, 2 * kWgTile * kFp8Slice);
      ptx::tensor_copy_2d(a_tile, &map_a, slice * kFp8Slice, 0, barrier);
      ptx::tensor_copy_2d(b_tile, &map_b, slice * kFp8Slice, 0, barrier);
    }
    ptx::mbarrier_wait(barrier, static_cast<unsigned>(slice) & 1u);
    float(&d)[32] = promote ? partial : acc;
    ptx::wgmma_fence();
    for (int kk = 0; kk < kFp8Slice / 32; ++kk) {
      const std::uint64_t desc_a = ptx::matrix_descriptor(a_tile + kk * 32, 16, 1024, ptx::Swizzle::B128);
      const std::uint64_t desc_b = ptx::matrix_descriptor(b_tile + kk * 32, 16, 1024, ptx::Swizzle::B128);
      ptx::wgmma_m64k32_fp8<64, false, false>(d, desc_a, desc_b, promote ? kk > 0 : slice > 0 || kk > 0);
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    if (promote) {
      for (int i = 0; i < 32; ++i) acc[i] += partial[i];  // f32 on the CUDA cores
    }
    __syncthreads();  // every warp's wgmmas are done with the slice before the next copy lands
  }
  store_m64n64(acc, c);
}

void fp8_wgmma_gemm(const std::uint8_t* a, const std::uint8_t* b, float* c, int k, bool promote, Stream stream) {
  kernels::TensorMapSpec spec;
  spec.bytes = true;
  spec.rank = 2;
  spec.dims[0] = static_cast<std::uint64_t>(k);
  spec.dims[1] = kWgTile;
  spec.strides[1] = static_cast<std::uint64_t>(k);
  spec.box[0] = kFp8Slice;
  spec.box[1] = kWgTile;
  spec.swizzle_bytes = 128;
  kernels::TensorMap map_a{}, map_b{};
  spec.address = a;
  encode_tensor_map(map_a, spec);
  spec.address = b;
  encode_tensor_map(map_b, spec);
  const std::size_t shared = 2 * kWgTile * kFp8Slice + sizeof(std::uint64_t) + 1024;
  launch("fp8_wgmma_gemm_kernel", fp8_wgmma_gemm_kernel, dim3(1), dim3(128), shared, stream, map_a, map_b, c, k,
         promote);
}

// ---- fp8_convert_pairs ----------------------------------------------------------------------

__global__ void fp8_convert_pairs_kernel(const float* in, std::uint16_t* e4m3, std::uint16_t* e5m2, int pairs) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= pairs) return;
  e4m3[i] = ptx::cvt_fp8x2<false>(in[2 * i], in[2 * i + 1]);
  e5m2[i] = ptx::cvt_fp8x2<true>(in[2 * i], in[2 * i + 1]);
}

void fp8_convert_pairs(const float* in, std::uint16_t* e4m3, std::uint16_t* e5m2, int pairs, Stream stream) {
  launch("fp8_convert_pairs_kernel", fp8_convert_pairs_kernel, dim3(static_cast<unsigned>((pairs + 255) / 256)),
         dim3(256), 0, stream, in, e4m3, e5m2, pairs);
}

// ---- mma_gemm_f16 ---------------------------------------------------------------------------

// Shared memory: A tile 16x16 then B tile 16x8, 16-bit elements.
constexpr int kATileElements = 16 * 16;
constexpr int kBTileElements = 16 * 8;

__global__ void mma_gemm_f16_kernel(const std::uint16_t* a, const std::uint16_t* b, float* c, int n, int k) {
  MT_DYNAMIC_SHARED(std::uint16_t, smem);
  std::uint16_t* a_tile = smem;
  std::uint16_t* b_tile = smem + kATileElements;
  const unsigned lane = threadIdx.x;
  const int tile_row = static_cast<int>(blockIdx.y) * 16;
  const int tile_col = static_cast<int>(blockIdx.x) * 8;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < k; k0 += 16) {
    // A tile: 32 chunks of 16 bytes (row lane/2, half lane%2). B tile: 16 rows of 16 bytes.
    const int a_row = static_cast<int>(lane / 2);
    const int a_col = static_cast<int>(lane % 2) * 8;
    ptx::cp_async_cg16(a_tile + a_row * 16 + a_col, a + (tile_row + a_row) * k + k0 + a_col);
    if (lane < 16) ptx::cp_async_cg16(b_tile + lane * 8, b + (k0 + static_cast<int>(lane)) * n + tile_col);
    ptx::cp_async_commit_group();
    ptx::cp_async_wait_group<0>();
    __syncthreads();  // other lanes' copies must be visible before ldmatrix

    // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    std::uint32_t a_frag[4];
    ptx::ldmatrix_x4(a_frag, a_tile + (lane % 16) * 16 + (lane / 16) * 8);
    // B is stored k-major (row = k); .trans hands each lane two consecutive k of one column.
    std::uint32_t b_frag[2];
    ptx::ldmatrix_x2_trans(b_frag, b_tile + (lane % 16) * 8);
    ptx::mma_m16n8k16_f16(acc, a_frag, b_frag, acc);
    __syncthreads();  // the next iteration overwrites the tiles
  }
  const int row = tile_row + static_cast<int>(lane / 4);
  const int col = tile_col + static_cast<int>(lane % 4) * 2;
  c[row * n + col] = acc[0];
  c[row * n + col + 1] = acc[1];
  c[(row + 8) * n + col] = acc[2];
  c[(row + 8) * n + col + 1] = acc[3];
}

void mma_gemm_f16(const std::uint16_t* a, const std::uint16_t* b, float* c, int m, int n, int k, Stream stream) {
  const std::size_t shared_bytes = (kATileElements + kBTileElements) * sizeof(std::uint16_t);
  launch("mma_gemm_f16_kernel", mma_gemm_f16_kernel, dim3(n / 8, m / 16), dim3(32), shared_bytes, stream, a, b, c, n,
         k);
}

}  // namespace mt::MT_KERNEL_NS
