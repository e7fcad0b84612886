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
// The Hopper (sm_90) instructions (the mbarrier, bulk and TMA copies,
// thread block clusters, wgmma, setmaxnreg) are in ptx_hopper.h, which
// includes this header.
#pragma once

#include <cstdint>

#include "kernels/common/element.h"
#include "runtime/cuda_compat.h"
#include "runtime/fp8.h"

namespace mt::MT_KERNEL_NS::ptx {

// The call site a simulated instruction reports its faults at (ptx_hopper.h's
// wrappers take it too, so these stay defined).
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

// ---- packing helpers for fragments ----------------------------------------------------

// Two 16-bit values in one register, `low` in bits 0..15 (element order of a fragment).
__device__ __forceinline__ std::uint32_t pack_halves(std::uint16_t low, std::uint16_t high) {
  return static_cast<std::uint32_t>(low) | (static_cast<std::uint32_t>(high) << 16);
}

}  // namespace mt::MT_KERNEL_NS::ptx
