// Tensor Core and async-copy instructions, as small inline wrappers.
//
// This is the only place mixtape kernels use inline PTX. On the GPU each
// wrapper is the PTX instruction; in the simulator it follows the PTX ISA's
// documented per-lane fragment layout (runtime/sim/warp_ops.cpp), so a kernel
// that puts an element in the wrong register gets wrong numbers in CI, not
// just on a GPU.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"), with group = lane / 4 and t = lane % 4:
//
//   A 16x16 row-major, uint32_t a[4] (two 16-bit values each, low half first):
//     a[0] = A[group    ][2t..2t+1]     a[1] = A[group + 8][2t..2t+1]
//     a[2] = A[group    ][2t+8..2t+9]   a[3] = A[group + 8][2t+8..2t+9]
//   B 16x8 (K x N, "col": each register holds two consecutive k), uint32_t b[2]:
//     b[0] = B[2t..2t+1][group]         b[1] = B[2t+8..2t+9][group]
//   C, D 16x8 float, float c[4]:
//     c[0..1] = C[group][2t..2t+1]      c[2..3] = C[group + 8][2t..2t+1]
//
// ldmatrix (m8n8, b16): lanes 8m..8m+7 pass the 16-byte-aligned addresses of
// the 8 rows of matrix m; register m of lane l receives row l/4, columns
// 2(l%4), 2(l%4)+1 — exactly an A/B/C-style fragment. `.trans` delivers the
// transpose (column l/4, rows 2(l%4), 2(l%4)+1). ldmatrix_x4 of a 16x16 tile
// whose row r lives at &tile[r % 16][8 * (r / 16)] yields the A fragment.
//
// cp.async copies 4/8/16 bytes global -> shared without staging through
// registers; commit_group closes a group, wait_group<N> waits until at most N
// groups are still in flight. Requires sm_80+ (as do bf16 mma and ldmatrix
// pairs with it in practice).
//
// Hopper (sm_90): the mbarrier — an 8-byte shared-memory barrier that counts
// arrivals and bytes of asynchronous copies (tx) per phase, its phase parity
// flipping when both reach zero — and cp.async.bulk, a copy of a contiguous
// run of bytes from global to shared memory by the copy engine, completing
// its bytes on an mbarrier. The simulator follows the same rules
// (runtime/sim/runtime.h) and lands bulk copies as late as it can.
//
// Hopper's TMA: cp.async.bulk.tensor copies a box (tile) of a tensor that a
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

#include "runtime/cuda_compat.h"
#include "kernels/common/element.h"
#include "kernels/common/tensor_map.h"
#include "runtime/fp8.h"
#if !MT_SIM_BUILD
#include "kernels/common/ptx_wgmma_asm.h"
#endif

namespace mt::MT_KERNEL_NS::ptx {

#if MT_SIM_BUILD
#define MT_PTX_SITE , ::mt::simulator::SourceSite site = ::mt::simulator::SourceSite::current()
#define MT_PTX_SITE_FIRST ::mt::simulator::SourceSite site = ::mt::simulator::SourceSite::current()
#else
#define MT_PTX_SITE
#define MT_PTX_SITE_FIRST
#endif

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 ------------

#if MT_SIM_BUILD
namespace detail {
inline void mma(const char* name, ::mt::simulator::WarpCompleteFn op, float (&d)[4], const std::uint32_t (&a)[4],
                const std::uint32_t (&b)[2], const float (&c)[4], ::mt::simulator::SourceSite site) {
  const ::mt::simulator::warp_ops::MmaInput input{a, b, c};
  float result[4];
  ::mt::simulator::warp_sync(name, op, 0xffffffffu, &input, result, 0, site);
  for (int i = 0; i < 4; ++i) d[i] = result[i];
}
}  // namespace detail
#endif

// D = A * B + C with f16 inputs and f32 accumulation. d may alias c.
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2], const float (&c)[4] MT_PTX_SITE) {
#if MT_SIM_BUILD
  detail::mma("mma.sync.m16n8k16.f16", ::mt::simulator::warp_ops::mma_m16n8k16_f16, d, a, b, c, site);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// D = A * B + C with bf16 inputs and f32 accumulation. d may alias c.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                                  const std::uint32_t (&b)[2], const float (&c)[4] MT_PTX_SITE) {
#if MT_SIM_BUILD
  detail::mma("mma.sync.m16n8k16.bf16", ::mt::simulator::warp_ops::mma_m16n8k16_bf16, d, a, b, c, site);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// ---- mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 ---------------------------------
// INT8 inference's Tensor Core product: A u8 (activations with their zero
// point), B s8 (weights), exact s32 sums. Fragments as for m16n8k16 with four
// bytes per register where that has two halves (lowest byte first):
//   a[0] = A[group][4t..4t+3]        a[1] = A[group + 8][4t..4t+3]
//   a[2] = A[group][4t+16..4t+19]    a[3] = A[group + 8][4t+16..4t+19]
//   b[0] = B[4t..4t+3][group]        b[1] = B[4t+16..4t+19][group]
//   c[0..1] = C[group][2t..2t+1]     c[2..3] = C[group + 8][2t..2t+1]

// D = A * B + C. d may alias c.
__device__ __forceinline__ void mma_m16n8k32_u8s8(std::int32_t (&d)[4], const std::uint32_t (&a)[4],
                                                  const std::uint32_t (&b)[2], const std::int32_t (&c)[4] MT_PTX_SITE) {
#if MT_SIM_BUILD
  const ::mt::simulator::warp_ops::MmaInt8Input input{a, b, c};
  std::int32_t result[4];
  ::mt::simulator::warp_sync("mma.sync.m16n8k32.u8.s8", ::mt::simulator::warp_ops::mma_m16n8k32_u8s8, 0xffffffffu,
                             &input, result, 0, site);
  for (int i = 0; i < 4; ++i) d[i] = result[i];
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#endif
}

// ---- ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 ---------------------

#if MT_SIM_BUILD
namespace detail {
template <int Matrices, bool Trans>
void ldmatrix(std::uint32_t (&r)[Matrices], const void* row, ::mt::simulator::SourceSite site) {
  // This lane reads its row (if it supplies one) — tell the race checker.
  if (::mt::simulator::lane_id() < 8u * Matrices) ::mt::simulator::note_memory_access(row, 16, false);
  std::uint32_t result[4];
  ::mt::simulator::warp_sync(Trans ? "ldmatrix.trans" : "ldmatrix", ::mt::simulator::warp_ops::ldmatrix, 0xffffffffu,
                             row, result, static_cast<std::uint64_t>(Matrices | (Trans ? 0x100 : 0)), site);
  for (int i = 0; i < Matrices; ++i) r[i] = result[i];
}
}  // namespace detail
#define MT_LDMATRIX(N, TRANS, SUFFIX)                                                                        \
  __device__ __forceinline__ void ldmatrix_x##N##SUFFIX(std::uint32_t(&r)[N], const void* row MT_PTX_SITE) { \
    detail::ldmatrix<N, TRANS>(r, row, site);                                                                \
  }
#else
// 32-bit shared-memory address of a generic pointer, as ldmatrix/cp.async want.
__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}
#define MT_LDMATRIX_ASM_1 "{%0}, [%1]"
#define MT_LDMATRIX_ASM_2 "{%0,%1}, [%2]"
#define MT_LDMATRIX_ASM_4 "{%0,%1,%2,%3}, [%4]"
#define MT_LDMATRIX_OUT_1(r) "=r"(r[0])
#define MT_LDMATRIX_OUT_2(r) "=r"(r[0]), "=r"(r[1])
#define MT_LDMATRIX_OUT_4(r) "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
#endif

#if MT_SIM_BUILD
MT_LDMATRIX(1, false, )
MT_LDMATRIX(2, false, )
MT_LDMATRIX(4, false, )
MT_LDMATRIX(1, true, _trans)
MT_LDMATRIX(2, true, _trans)
MT_LDMATRIX(4, true, _trans)
#undef MT_LDMATRIX
#else
#if defined(__CUDA_ARCH__)
#define MT_LDMATRIX_BODY(N, QUALIFIER)                                                              \
  asm volatile("ldmatrix.sync.aligned.m8n8.x" #N QUALIFIER ".shared.b16 " MT_LDMATRIX_ASM_##N ";\n" \
               : MT_LDMATRIX_OUT_##N(r)                                                             \
               : "r"(shared_address(row)));
#else
#define MT_LDMATRIX_BODY(N, QUALIFIER) \
  (void)r;                             \
  (void)row;
#endif
#define MT_LDMATRIX(N, QUALIFIER, SUFFIX)                                                        \
  __device__ __forceinline__ void ldmatrix_x##N##SUFFIX(std::uint32_t(&r)[N], const void* row) { \
    MT_LDMATRIX_BODY(N, QUALIFIER)                                                               \
  }
MT_LDMATRIX(1, "", )
MT_LDMATRIX(2, "", )
MT_LDMATRIX(4, "", )
MT_LDMATRIX(1, ".trans", _trans)
MT_LDMATRIX(2, ".trans", _trans)
MT_LDMATRIX(4, ".trans", _trans)
#undef MT_LDMATRIX
#endif

// ---- cp.async -----------------------------------------------------------------------

// Copies Bytes (4, 8 or 16) from global to shared memory, through L1 (.ca).
// src_bytes < Bytes reads only src_bytes and zero-fills the rest (0 = all zeros:
// the usual way to pad out-of-bounds tiles).
template <int Bytes>
__device__ __forceinline__ void cp_async_ca(void* shared_dst, const void* global_src,
                                            unsigned src_bytes = Bytes MT_PTX_SITE) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#if MT_SIM_BUILD
  (void)site;
  ::mt::simulator::cp_async(shared_dst, global_src, Bytes, src_bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(shared_dst)), "l"(global_src),
               "n"(Bytes), "r"(src_bytes));
#endif
}

// 16 bytes, bypassing L1 (.cg) — the usual choice for streamed GEMM tiles.
__device__ __forceinline__ void cp_async_cg16(void* shared_dst, const void* global_src,
                                              unsigned src_bytes = 16 MT_PTX_SITE) {
#if MT_SIM_BUILD
  (void)site;
  ::mt::simulator::cp_async(shared_dst, global_src, 16, src_bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared_dst)), "l"(global_src),
               "r"(src_bytes));
#endif
}

__device__ __forceinline__ void cp_async_commit_group() {
#if MT_SIM_BUILD
  ::mt::simulator::cp_async_commit_group();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
#if MT_SIM_BUILD
  ::mt::simulator::cp_async_wait_group(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait_group<0>(); }

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

// ---- FP8 conversions (sm_89+) ---------------------------------------------------------

// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: two f32 to two FP8 (E5M2 when
// E5M2, else E4M3) in one 16-bit word, `hi` in the upper byte and `lo` in
// the lower. Round to nearest even, overflow and infinity saturate to the
// largest finite value, NaN stays NaN: exactly runtime/fp8.h's software
// conversion, which the simulator (and a GPU before sm_89) runs instead. A
// GPU check compares the two over a sweep.
template <bool E5M2>
__device__ __forceinline__ std::uint16_t cvt_fp8x2(float hi, float lo) {
#if !MT_SIM_BUILD && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  std::uint16_t r;
  if constexpr (E5M2) {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  }
  return r;
#else
  const auto convert = [](float v) { return E5M2 ? f32_to_e5m2_bits(v) : f32_to_e4m3_bits(v); };
  return static_cast<std::uint16_t>((convert(hi) << 8) | convert(lo));
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

// ---- packing helpers for fragments ----------------------------------------------------

// Two 16-bit values in one register, `low` in bits 0..15 (element order of a fragment).
__device__ __forceinline__ std::uint32_t pack_halves(std::uint16_t low, std::uint16_t high) {
  return static_cast<std::uint32_t>(low) | (static_cast<std::uint32_t>(high) << 16);
}

#undef MT_PTX_SITE
#undef MT_PTX_SITE_FIRST

}  // namespace mt::MT_KERNEL_NS::ptx
