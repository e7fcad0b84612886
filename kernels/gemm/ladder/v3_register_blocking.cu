// GEMM ladder, version 3: register blocking (2-D block tiling).
//
// What: as v1 (every layout, f64/f32/f16/bf16, bias + ReLU epilogue).
// Algorithm: a 256-thread block owns a 64x64 tile of C and walks K in steps of
//   16. Each step stages a 64x16 slice of op(A) and a 16x64 slice of op(B) in
//   shared memory (4 elements per thread each, read along whichever dimension
//   is contiguous in global memory), then every thread computes a 4x4 grid of
//   outputs: per k it loads 4 A values and 4 B values into registers and does
//   16 FMAs — 2 shared loads per 4 FMAs instead of v2's 2 per 1. A thread's
//   outputs sit 16 rows / 16 columns apart, so a warp's shared-memory reads
//   are conflict-free and its stores are contiguous.
// Precision: f32 accumulation (f64 for f64), one rounding on store. This is the
//   production f32 GEMM: true FP32 (no TF32 — the own kernels never use it).
// Bound: compute-bound on the CUDA cores at large sizes (no Tensor Cores), so
//   for f16/bf16 it tops out far below v4/v5.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md): 4096^3 f32 14.7 TFLOP/s =
//   29% of cuBLASLt's true-FP32 51.2; f16 15.3 (no Tensor Cores yet).
#include "kernels/gemm/ladder/gemm_common.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kBlockM = 64, kBlockN = 64, kBlockK = 16;
constexpr int kThreadsX = 16, kThreadsY = 16, kThreads = kThreadsX * kThreadsY;
constexpr int kPerThreadM = kBlockM / kThreadsY, kPerThreadN = kBlockN / kThreadsX;  // 4 x 4

template <typename E>
__global__ void __launch_bounds__(kThreads)
    gemm_v3_kernel(kernels::GemmArgs args, gemm_detail::OperandStrides sa, gemm_detail::OperandStrides sb) {
  using Storage = typename E::Storage;
  using Acc = typename E::Acc;
  __shared__ Acc a_tile[kBlockK][kBlockM];  // [k][m]
  __shared__ Acc b_tile[kBlockK][kBlockN];  // [k][n]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int tid = ty * kThreadsX + tx;
  const int block_row = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_col = static_cast<int>(blockIdx.x) * kBlockN;
  const int batch = static_cast<int>(blockIdx.z);
  const Storage* a = static_cast<const Storage*>(args.a) + batch * args.batch_stride_a;
  const Storage* b = static_cast<const Storage*>(args.b) + batch * args.batch_stride_b;
  // Walk the contiguous dimension with neighbouring threads (coalesced loads).
  const bool a_k_contiguous = sa.col == 1;
  const bool b_n_contiguous = sb.col == 1;

  Acc acc[kPerThreadM][kPerThreadN] = {};
  for (int k0 = 0; k0 < args.k; k0 += kBlockK) {
    for (int e = tid; e < kBlockM * kBlockK; e += kThreads) {
      const int m = a_k_contiguous ? e / kBlockK : e % kBlockM;
      const int kk = a_k_contiguous ? e % kBlockK : e / kBlockM;
      const int grow = block_row + m, gk = k0 + kk;
      a_tile[kk][m] = (grow < args.m && gk < args.k) ? E::to_acc(a[grow * sa.row + gk * sa.col]) : Acc(0);
    }
    for (int e = tid; e < kBlockK * kBlockN; e += kThreads) {
      const int n = b_n_contiguous ? e % kBlockN : e / kBlockK;
      const int kk = b_n_contiguous ? e / kBlockN : e % kBlockK;
      const int gcol = block_col + n, gk = k0 + kk;
      b_tile[kk][n] = (gk < args.k && gcol < args.n) ? E::to_acc(b[gk * sb.row + gcol * sb.col]) : Acc(0);
    }
    __syncthreads();
    MT_UNROLL
    for (int kk = 0; kk < kBlockK; ++kk) {
      Acc a_reg[kPerThreadM], b_reg[kPerThreadN];
      MT_UNROLL
      for (int i = 0; i < kPerThreadM; ++i) a_reg[i] = a_tile[kk][ty + i * kThreadsY];
      MT_UNROLL
      for (int j = 0; j < kPerThreadN; ++j) b_reg[j] = b_tile[kk][tx + j * kThreadsX];
      MT_UNROLL
      for (int i = 0; i < kPerThreadM; ++i) {
        MT_UNROLL
        for (int j = 0; j < kPerThreadN; ++j) acc[i][j] += a_reg[i] * b_reg[j];
      }
    }
    __syncthreads();
  }
  MT_UNROLL
  for (int i = 0; i < kPerThreadM; ++i) {
    MT_UNROLL
    for (int j = 0; j < kPerThreadN; ++j) {
      gemm_detail::store_output<E>(args, batch, block_row + ty + i * kThreadsY, block_col + tx + j * kThreadsX,
                                   acc[i][j]);
    }
  }
}

}  // namespace

void gemm_v3_register_blocking(const kernels::GemmArgs& args, Stream stream) {
  gemm_detail::check_args(args, "gemm_v3_register_blocking");
  element::visit(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if (gemm_detail::handle_degenerate<E>(args, stream)) return;
    const dim3 grid(gemm_detail::ceil_div(args.n, kBlockN), gemm_detail::ceil_div(args.m, kBlockM), args.batch);
    launch("gemm_v3_kernel", gemm_v3_kernel<E>, grid, dim3(kThreadsX, kThreadsY), 0, stream, args,
           gemm_detail::a_strides(args), gemm_detail::b_strides(args));
  });
}

}  // namespace mt::MT_KERNEL_NS
