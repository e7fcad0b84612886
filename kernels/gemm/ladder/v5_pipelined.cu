// GEMM ladder, version 5: a cp.async multi-stage pipeline (the production
// f16/bf16 kernel behind mt::kernels::bmm).
//
// What: as v4 — f16/bf16 inputs, every layout, batched, ragged edges, with the
//   bias + ReLU epilogue that makes a Linear layer one kernel.
// Algorithm: v4's tiling and Tensor Core inner loop, but shared memory holds 3
//   stages (3 k-slices of A and B, ~60 KB). cp.async copies global -> shared
//   without passing through registers and without blocking the thread, so
//   while the warps multiply slice k, the copies of slices k+1 and k+2 are in
//   flight. The loop per slice:
//     wait_group<1>  (slice k has landed; k+1 may still be in flight)
//     __syncthreads  (everyone's copies visible; everyone done with slice k-1)
//     issue cp.async for slice k+2 into the stage slice k-1 used; commit
//     2 x (ldmatrix + 16 mma.sync) on slice k
//   Partial chunks at a ragged edge use cp.async's zero-fill (src-size < 16);
//   operands whose rows are not 16-byte aligned (e.g. K = 23) fall back to
//   element-wise stores into the same stage — slower, same schedule.
// Precision: f32 accumulation in the Tensor Cores and registers; bias + ReLU
//   in f32; one rounding to f16/bf16 on store.
// Bound: compute-bound at 4096^3. What is left on the table against
//   cuBLASLt on Hopper: wgmma + TMA (not used here), bigger warp tiles,
//   swizzled instead of padded shared memory, and a vectorised epilogue.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md): 4096^3 f16 200 TFLOP/s,
//   bf16 202 — 29% of cuBLASLt (679 / 715), below the 70% aim: cuBLASLt uses
//   wgmma on Hopper, which mma.sync cannot match. 2.9x v4 from the pipeline.
#include "kernels/gemm/ladder/tensor_core_tiles.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace tensor_core;

constexpr int kStages = 3;

template <typename E, bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads) gemm_v5_kernel(kernels::GemmArgs args, bool a_vector_ok, bool b_vector_ok) {
  MT_DYNAMIC_SHARED(std::uint16_t, stages);
  const int batch = static_cast<int>(blockIdx.z);
  const int block_row = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_col = static_cast<int>(blockIdx.x) * kBlockN;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_row = (warp / kWarpsN) * kWarpM;
  const int warp_col = (warp % kWarpsN) * kWarpN;
  const auto* a = static_cast<const std::uint16_t*>(args.a) + batch * args.batch_stride_a;
  const auto* b = static_cast<const std::uint16_t*>(args.b) + batch * args.batch_stride_b;
  const int k_tiles = (args.k + kBlockK - 1) / kBlockK;

  // Prologue: put the first kStages - 1 slices in flight. A group is committed
  // even when there is nothing to load so the wait_group counts stay uniform.
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      load_stage<TransA, TransB, true>(stages + s * kStageElements, args, a, b, block_row, block_col, s * kBlockK,
                                       a_vector_ok, b_vector_ok);
    }
    ptx::cp_async_commit_group();
  }

  float acc[kTilesM][kTilesN][4] = {};
  for (int kt = 0; kt < k_tiles; ++kt) {
    ptx::cp_async_wait_group<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      load_stage<TransA, TransB, true>(stages + (next % kStages) * kStageElements, args, a, b, block_row, block_col,
                                       next * kBlockK, a_vector_ok, b_vector_ok);
    }
    ptx::cp_async_commit_group();
    const std::uint16_t* stage = stages + (kt % kStages) * kStageElements;
    MT_UNROLL
    for (int kk = 0; kk < kBlockK; kk += kMmaK) warp_mma_k16<E, TransA, TransB>(stage, kk, warp_row, warp_col, acc);
  }
  ptx::cp_async_wait_all();
  store_accumulators<E>(args, batch, block_row + warp_row, block_col + warp_col, acc);
}

template <typename E, bool TransA, bool TransB>
struct V5Kernel {
  static auto get() { return gemm_v5_kernel<E, TransA, TransB>; }
};

}  // namespace

void gemm_v5_pipelined(const kernels::GemmArgs& args, Stream stream) {
  gemm_detail::check_args(args, "gemm_v5_pipelined");
  if (args.dtype == kernels::KernelDType::F16 && gemm_detail::handle_degenerate<element::F16>(args, stream)) return;
  if (args.dtype == kernels::KernelDType::BF16 && gemm_detail::handle_degenerate<element::BF16>(args, stream)) return;
  tensor_core::launch_for_layout<V5Kernel>("gemm_v5_kernel", args, kStages * kStageElements * sizeof(std::uint16_t),
                                           stream);
}

}  // namespace mt::MT_KERNEL_NS
