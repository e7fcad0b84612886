// Example kernels that compile both ways: mt::sim::* always, mt::cuda::* when
// CUDA is enabled (MT_WITH_CUDA_KERNELS). Pointers are device memory on the
// GPU and host memory on the simulator.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"

// *out += sum(in[0..n)); block-level tree reduction in shared memory, finished
// by warp shuffles, one atomicAdd per block. *out must be initialised.
MT_CUDA_KERNEL_API(void block_sum(const float* in, float* out, int n, mt::kernels::Stream stream));

// out (cols x rows) = transpose of in (rows x cols), through a padded 32x33 tile.
MT_CUDA_KERNEL_API(void transpose(const float* in, float* out, int rows, int cols, mt::kernels::Stream stream));

// c (m x n, f32) = a (m x k, f16 row-major) * b (k x n, f16 row-major), one warp
// per 16x8 output tile: cp.async to shared memory, ldmatrix, mma.sync.
// m % 16 == 0, n % 8 == 0, k % 16 == 0.
// out[i] = factor * in[i] for `tiles` tiles of 256 floats (tiles even; in
// 16-byte aligned), each block staging two tiles in turn through shared
// memory with one cp.async.bulk copy each, completing on an mbarrier whose
// phase parity alternates (Hopper, sm_90: the GPU build traps before that).
MT_CUDA_KERNEL_API(void bulk_copy_scale(const float* in, float* out, float factor, int tiles,
                                        mt::kernels::Stream stream));

// c (64 x 64, f32) = a (64 x 64, f16 row-major) * b (64 x 64, f16 row-major)
// by one warpgroup: TMA loads both tiles (128-byte swizzle) on an mbarrier,
// four wgmma m64n64k16 read them through matrix descriptors. a_shared gets
// A's tile as it sat in shared memory (4096 f16, swizzled). Hopper (sm_90a);
// a, b 16-byte aligned.
MT_CUDA_KERNEL_API(void tma_wgmma_tile(const std::uint16_t* a, const std::uint16_t* b, float* c,
                                       std::uint16_t* a_shared, mt::kernels::Stream stream));

// c (64 x 64, f32) = a (64 x k, E4M3 row-major) * b^T (b: 64 x k, E4M3
// row-major, i.e. B stored N x K) by one warpgroup: for each 128 of K, TMA
// brings both 128-byte-wide slices (128-byte swizzle) and four wgmma
// m64n64k32 multiply them. With `promote`, each slice's four go into a fresh
// partial sum that is then added to f32 registers (DeepSeek-V3's promotion
// every 128 of K); without, they accumulate in the Tensor Core's
// accumulator all along. k % 128 == 0; a, b 16-byte aligned; sm_90a.
MT_CUDA_KERNEL_API(void fp8_wgmma_gemm(const std::uint8_t* a, const std::uint8_t* b, float* c, int k, bool promote,
                                       mt::kernels::Stream stream));

// e4m3[i] = cvt.rn.satfinite.e4m3x2.f32(in[2i], in[2i + 1]) (in[2i] in the
// high byte), e5m2 likewise, for i < pairs: the hardware conversion on a GPU
// (sm_89+), runtime/fp8.h's on the simulator.
MT_CUDA_KERNEL_API(void fp8_convert_pairs(const float* in, std::uint16_t* e4m3, std::uint16_t* e5m2, int pairs,
                                          mt::kernels::Stream stream));

MT_CUDA_KERNEL_API(void mma_gemm_f16(const std::uint16_t* a, const std::uint16_t* b, float* c, int m, int n, int k,
                                     mt::kernels::Stream stream));
