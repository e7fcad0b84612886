// Hopper's instructions, as small inline wrappers (the sm_80 ones, and how a
// wrapper runs on the GPU and in the simulator, are in ptx.h).
//
// The mbarrier (sm_90) — an 8-byte shared-memory barrier that counts
// arrivals and bytes of asynchronous copies (tx) per phase, its phase parity
// flipping when both reach zero — and cp.async.bulk, a copy of a contiguous
// run of bytes from global to shared memory by the copy engine, completing
// its bytes on an mbarrier. The simulator follows the same rules
// (runtime/sim/runtime.h) and lands bulk copies as late as it can.
//
// TMA: cp.async.bulk.tensor copies a box (tile) of a tensor that a
// tensor map (kernels/common/tensor_map.h) describes, zero-filling what lies
// outside the tensor and swizzling it into shared memory, completing on an
// mbarrier. wgmma.mma_async: a warpgroup (4 warps, 128 threads) multiplies
// A (64 x 16) by B (16 x N), both read from shared memory through 64-bit
// matrix descriptors (start address, leading/stride byte offsets, swizzle),
// into N/2 f32 accumulators per thread — asynchronously: issue, commit a
// group, and read the accumulators (or overwrite the tiles) only after
// wgmma.wait_group. Accumulator fragment, warp w of the warpgroup, group =
// lane / 4, t = lane % 4, slice i < N/8:
//   d[4i + 0..1] = D[16w + group][8i + 2t .. +1]   d[4i + 2..3] = D[16w + group + 8][8i + 2t .. +1]
// The simulator reads the descriptors by the PTX ISA's canonical layouts,
// element by element (runtime/sim/hopper.cpp). Thread block clusters: a
// block's rank, the cluster barrier, another block's shared memory (mapa),
// arrivals on its mbarriers, and TMA copies multicast into several blocks;
// launch them with launch_clusters (runtime/launch.h). On GPUs before
// sm_90 these trap; wgmma and setmaxnreg need sm_90a.
#pragma once

#include <cstdint>

#include "kernels/common/ptx.h"
#include "kernels/common/tensor_map.h"
#if !MT_SIM_BUILD
#include "kernels/common/ptx_wgmma_asm.h"
#endif

namespace mt::MT_KERNEL_NS::ptx {

// ---- mbarrier and cp.async.bulk (sm_90) -----------------------------------------------

#if !MT_SIM_BUILD
#define MT_HOPPER_ONLY_TRAP() __trap()
#endif

// Initialises the barrier for `expected_arrivals` arrivals per phase, phase 0.
// Make the init visible (__syncthreads) before any other thread uses it.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* barrier, unsigned expected_arrivals) {
#if MT_SIM_BUILD
  ::mt::simulator::mbarrier_init(barrier, expected_arrivals);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(expected_arrivals)
               : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// One arrival on the barrier, first adding `tx_bytes` to the bytes the phase
// waits for (arrive.expect_tx; 0 is a plain arrive).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* barrier, unsigned tx_bytes) {
#if MT_SIM_BUILD
  ::mt::simulator::mbarrier_arrive(barrier, tx_bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   shared_address(barrier)),
               "r"(tx_bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* barrier) {
#if MT_SIM_BUILD
  ::mt::simulator::mbarrier_arrive(barrier, 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(shared_address(barrier))
               : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Returns once the phase of parity `parity` (0 for the first phase, then
// alternating) has completed: its arrivals all made, its bytes all landed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* barrier, unsigned parity MT_PTX_SITE) {
#if MT_SIM_BUILD
  ::mt::simulator::mbarrier_wait_parity(barrier, parity, site);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  while (done == 0) {
    asm volatile(
        "{\n .reg .pred complete;\n mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        " selp.u32 %0, 1, 0, complete;\n}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  }
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global to shared memory with the copy engine; they count against the
// barrier's tx when they land. One thread issues it.
__device__ __forceinline__ void bulk_copy_global_to_shared(void* shared_dst, const void* global_src, unsigned bytes,
                                                           std::uint64_t* barrier) {
#if MT_SIM_BUILD
  ::mt::simulator::bulk_copy_global_to_shared(shared_dst, global_src, bytes, barrier);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(shared_dst)),
               "l"(global_src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// ---- TMA: cp.async.bulk.tensor (sm_90) ------------------------------------------------

// Copies the box of `map` whose first element is at (c0, c1[, c2]) (innermost
// coordinate first, in elements; may lie partly outside the tensor: zeros)
// to `shared_dst` (128-byte aligned; 1024 for a 128-byte swizzle to line up
// with wgmma's), completing its bytes on `barrier`. One thread issues it.
__device__ __forceinline__ void tensor_copy_2d(void* shared_dst, const kernels::TensorMap* map, int c0, int c1,
                                               std::uint64_t* barrier) {
#if MT_SIM_BUILD
  const std::int32_t coords[3] = {c0, c1, 0};
  ::mt::simulator::tensor_copy_global_to_shared(shared_dst, map, coords, barrier);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(shared_address(shared_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(barrier))
      : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

__device__ __forceinline__ void tensor_copy_3d(void* shared_dst, const kernels::TensorMap* map, int c0, int c1, int c2,
                                               std::uint64_t* barrier) {
#if MT_SIM_BUILD
  const std::int32_t coords[3] = {c0, c1, c2};
  ::mt::simulator::tensor_copy_global_to_shared(shared_dst, map, coords, barrier);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(shared_address(shared_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(barrier))
      : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Orders this thread's earlier generic-proxy shared-memory accesses before
// later async-proxy ones (TMA, wgmma) — e.g. after zeroing a tile that wgmma
// reads. The simulator has one proxy; it is a no-op there.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if MT_SIM_BUILD
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// ---- thread block clusters (sm_90) ------------------------------------------------------

// This block's rank in its cluster (%cluster_ctarank).
__device__ __forceinline__ unsigned cluster_ctarank() {
#if MT_SIM_BUILD
  return ::mt::simulator::cluster_ctarank();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned rank = 0;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
#else
  return 0;
#endif
}

// The generic address of `shared` (this block's shared memory) in the
// cluster's block `rank`: distributed shared memory (mapa).
template <typename T>
__device__ __forceinline__ T* map_shared_rank(T* shared, unsigned rank) {
#if MT_SIM_BUILD
  return static_cast<T*>(::mt::simulator::map_shared_rank(shared, rank));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint64_t mapped = 0;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(mapped) : "l"(shared), "r"(rank));
  return reinterpret_cast<T*>(mapped);
#else
  (void)rank;
  return shared;
#endif
}

// Every thread of every block of the cluster arrives, then waits for all
// (barrier.cluster, release/acquire): blocks see each other's shared writes.
__device__ __forceinline__ void cluster_sync(MT_PTX_SITE_FIRST) {
#if MT_SIM_BUILD
  ::mt::simulator::cluster_sync(site);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Makes this thread's mbarrier inits visible to the cluster (before the
// cluster_sync after which other blocks arrive on them or multicast to them).
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
#if MT_SIM_BUILD
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// One arrival on the mbarrier at the same shared-memory offset as `barrier`
// in the cluster's block `rank` (mapa + a cluster-scope release arrive).
__device__ __forceinline__ void mbarrier_arrive_cluster(std::uint64_t* barrier, unsigned rank) {
#if MT_SIM_BUILD
  ::mt::simulator::mbarrier_arrive(::mt::simulator::map_shared_rank(barrier, rank), 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(shared_address(barrier)),
      "r"(rank)
      : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// tensor_copy_2d/3d to every block of the cluster whose bit is set in
// `cta_mask`: the box lands at the same offset of each one's shared memory
// and completes on the mbarrier at the same offset of each.
__device__ __forceinline__ void tensor_copy_2d_multicast(void* shared_dst, const kernels::TensorMap* map, int c0,
                                                         int c1, std::uint64_t* barrier, std::uint16_t cta_mask) {
#if MT_SIM_BUILD
  const std::int32_t coords[3] = {c0, c1, 0};
  ::mt::simulator::tensor_copy_multicast(shared_dst, map, coords, barrier, cta_mask);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3}], [%4], %5;\n" ::"r"(shared_address(shared_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(barrier)), "h"(cta_mask)
      : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

__device__ __forceinline__ void tensor_copy_3d_multicast(void* shared_dst, const kernels::TensorMap* map, int c0,
                                                         int c1, int c2, std::uint64_t* barrier,
                                                         std::uint16_t cta_mask) {
#if MT_SIM_BUILD
  const std::int32_t coords[3] = {c0, c1, c2};
  ::mt::simulator::tensor_copy_multicast(shared_dst, map, coords, barrier, cta_mask);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3, %4}], [%5], %6;\n" ::"r"(shared_address(shared_dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(barrier)), "h"(cta_mask)
      : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// ---- wgmma (sm_90a) -------------------------------------------------------------------

// The swizzle of a shared-memory operand, as a matrix descriptor encodes it.
enum class Swizzle : std::uint64_t { None = 0, B128 = 1, B64 = 2, B32 = 3 };

// A wgmma matrix descriptor for the operand starting at `tile` (shared
// memory). Offsets in bytes: `leading` (LBO) and `stride` (SBO) as the PTX
// ISA's canonical layouts define them for the operand's major-ness and swizzle.
__device__ __forceinline__ std::uint64_t matrix_descriptor(const void* tile, unsigned leading, unsigned stride,
                                                           Swizzle swizzle) {
#if MT_SIM_BUILD
  const std::uint64_t address = ::mt::simulator::shared_window_address(tile);
#else
  const std::uint64_t address = shared_address(tile);
#endif
  return ((address >> 4) & 0x3fffu) | (std::uint64_t{(leading >> 4) & 0x3fffu} << 16) |
         (std::uint64_t{(stride >> 4) & 0x3fffu} << 32) | (static_cast<std::uint64_t>(swizzle) << 62);
}

// Makes the accumulator registers' earlier writes visible to the next wgmma
// (before the first wgmma of a batch, and after touching the accumulators).
__device__ __forceinline__ void wgmma_fence() {
#if MT_SIM_BUILD
  ::mt::simulator::wgmma_fence();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

__device__ __forceinline__ void wgmma_commit_group() {
#if MT_SIM_BUILD
  ::mt::simulator::wgmma_commit_group();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Waits until at most N committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait_group(MT_PTX_SITE_FIRST) {
#if MT_SIM_BUILD
  ::mt::simulator::wgmma_wait_group(N, site);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

// Keeps the compiler from moving reads or writes of the accumulators across
// this point (CUTLASS's warpgroup_fence_operand): put it around the wgmma
// batch, or ptxas must serialise the wgmmas it sees other code touching.
template <int Count>
__device__ __forceinline__ void fence_accumulators(float (&acc)[Count]) {
#if !MT_SIM_BUILD
  MT_UNROLL
  for (int i = 0; i < Count; ++i) asm volatile("" : "+f"(acc[i])::"memory");
#else
  (void)acc;
#endif
}

// D (64 x N, f32, N/2 per thread) = A (64 x 16) * B (16 x N) [+ D]. A is
// K-major (row-major M x K) unless TransA (M-major); B is K-major (stored
// N x K) unless TransB (N-major, stored K x N); bf16 operands when BF16, else f16.
template <int N, bool BF16, bool TransA, bool TransB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                             bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for N = 64, 128, 256");
#if MT_SIM_BUILD
  constexpr auto type = BF16 ? ::mt::simulator::WgmmaType::BF16 : ::mt::simulator::WgmmaType::F16;
  ::mt::simulator::wgmma_mma_async({d, N, desc_a, desc_b, accumulate, TransA, TransB, type, type});
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int scale_d = accumulate ? 1 : 0;
  if constexpr (BF16) {
    if constexpr (N == 64) wgmma_asm::wgmma_n64_bf16<TransA, TransB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 128) wgmma_asm::wgmma_n128_bf16<TransA, TransB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 256) wgmma_asm::wgmma_n256_bf16<TransA, TransB>(d, desc_a, desc_b, scale_d);
  } else {
    if constexpr (N == 64) wgmma_asm::wgmma_n64_f16<TransA, TransB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 128) wgmma_asm::wgmma_n128_f16<TransA, TransB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 256) wgmma_asm::wgmma_n256_f16<TransA, TransB>(d, desc_a, desc_b, scale_d);
  }
#elif defined(__CUDA_ARCH__)
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  MT_HOPPER_ONLY_TRAP();
#endif
}

// FP8: D (64 x N, f32, N/2 per thread) = A (64 x 32) * B (32 x N) [+ D].
// Both operands K-major (A row-major M x K, B stored N x K: the PTX ISA
// allows no other layout for 8-bit types); each E4M3, or E5M2 when AE5M2 /
// BE5M2. A 32-byte K step, as f16's k16 is: the same descriptors address it.
// Accumulation in the Tensor Core keeps fewer bits than f32 (DeepSeek-V3:
// about 14 on H800), so long K sums promote partial results to f32
// registers every 128 of K; the simulator can model the narrowing
// (simulator::set_fp8_accumulator_bits).
template <int N, bool AE5M2, bool BE5M2>
__device__ __forceinline__ void wgmma_m64k32_fp8(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                                 bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma wrappers exist for N = 64, 128, 256");
#if MT_SIM_BUILD
  using ::mt::simulator::WgmmaType;
  ::mt::simulator::wgmma_mma_async({d, N, desc_a, desc_b, accumulate, false, false,
                                    AE5M2 ? WgmmaType::E5M2 : WgmmaType::E4M3,
                                    BE5M2 ? WgmmaType::E5M2 : WgmmaType::E4M3});
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int scale_d = accumulate ? 1 : 0;
#define MT_FP8_CALL(A, B)                                                              \
  if constexpr (N == 64) wgmma_asm::wgmma_n64_##A##_##B(d, desc_a, desc_b, scale_d);   \
  if constexpr (N == 128) wgmma_asm::wgmma_n128_##A##_##B(d, desc_a, desc_b, scale_d); \
  if constexpr (N == 256) wgmma_asm::wgmma_n256_##A##_##B(d, desc_a, desc_b, scale_d);
  if constexpr (!AE5M2 && !BE5M2) {
    MT_FP8_CALL(e4m3, e4m3)
  } else if constexpr (AE5M2 && !BE5M2) {
    MT_FP8_CALL(e5m2, e4m3)
  } else if constexpr (!AE5M2 && BE5M2) {
    MT_FP8_CALL(e4m3, e5m2)
  } else {
    MT_FP8_CALL(e5m2, e5m2)
  }
#undef MT_FP8_CALL
#elif defined(__CUDA_ARCH__)
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  MT_HOPPER_ONLY_TRAP();
#endif
}

// setmaxnreg: a warpgroup gives registers back (Increase = false) or takes
// more (true), so producer warps can run lean while consumer warps hold big
// accumulators. The simulator has no register file: a no-op there.
template <int Registers, bool Increase>
__device__ __forceinline__ void setmaxnreg() {
  static_assert(Registers % 8 == 0 && Registers >= 24 && Registers <= 256, "setmaxnreg takes 24..256, multiple of 8");
#if MT_SIM_BUILD
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (Increase) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
  }
#elif defined(__CUDA_ARCH__)
  MT_HOPPER_ONLY_TRAP();
#endif
}

#if !MT_SIM_BUILD
#undef MT_HOPPER_ONLY_TRAP
#endif

}  // namespace mt::MT_KERNEL_NS::ptx
