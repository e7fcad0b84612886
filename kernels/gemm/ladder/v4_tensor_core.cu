// GEMM ladder, version 4: Tensor Cores with mma.sync and ldmatrix.
//
// What: C[b] = op(A[b]) @ op(B[b]) (+ bias, ReLU) for f16 and bf16 inputs,
//   every layout (NN, NT, TN, TT), batched, ragged M/N/K.
// Algorithm: a 256-thread block owns a 128x128 tile of C (8 warps, 64x32
//   each; tensor_core_tiles.h). Per 32-wide k-slice the block copies the A and
//   B tiles to shared memory in 16-byte chunks (ordinary vector loads), waits
//   at a barrier, and each warp runs 2 k16 steps of: ldmatrix its fragments
//   (4 A tiles, 4 B tiles) and issue 16 mma.sync.m16n8k16 — the Tensor Core
//   does a 16x8x16 matrix product per instruction where v3 did one FMA per
//   thread. ldmatrix(.trans) puts each element in the register the mma
//   fragment layout wants, for either storage order, so no layout needs a copy.
// Precision: f16/bf16 products summed in f32 inside the Tensor Core; f32
//   accumulators across k; bias + ReLU in f32; one rounding to f16/bf16.
// Bound: compute-bound in principle, but the loads and the math are
//   serialised: every warp waits for the next tile to arrive from global
//   memory before it can issue an mma (v5 overlaps them). mma.sync also tops
//   out well below Hopper's wgmma peak (REFERENCES.md).
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md): 4096^3 f16 69.3 TFLOP/s,
//   bf16 69.4 — 10% of cuBLASLt; 4.5x v3 from the Tensor Cores alone.
#include "kernels/gemm/ladder/tensor_core_tiles.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace tensor_core;

template <typename E, bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads) gemm_v4_kernel(kernels::GemmArgs args, bool a_vector_ok, bool b_vector_ok) {
  MT_DYNAMIC_SHARED(std::uint16_t, stage);
  const int batch = static_cast<int>(blockIdx.z);
  const int block_row = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_col = static_cast<int>(blockIdx.x) * kBlockN;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warp_row = (warp / kWarpsN) * kWarpM;  // within the block
  const int warp_col = (warp % kWarpsN) * kWarpN;
  const auto* a = static_cast<const std::uint16_t*>(args.a) + batch * args.batch_stride_a;
  const auto* b = static_cast<const std::uint16_t*>(args.b) + batch * args.batch_stride_b;

  float acc[kTilesM][kTilesN][4] = {};
  for (int k0 = 0; k0 < args.k; k0 += kBlockK) {
    load_stage<TransA, TransB, /*Async=*/false>(stage, args, a, b, block_row, block_col, k0, a_vector_ok, b_vector_ok);
    __syncthreads();
    MT_UNROLL
    for (int kk = 0; kk < kBlockK; kk += kMmaK) warp_mma_k16<E, TransA, TransB>(stage, kk, warp_row, warp_col, acc);
    __syncthreads();  // the next slice overwrites the tiles
  }
  store_accumulators<E>(args, batch, block_row + warp_row, block_col + warp_col, acc);
}

template <typename E, bool TransA, bool TransB>
struct V4Kernel {
  static auto get() { return gemm_v4_kernel<E, TransA, TransB>; }
};

}  // namespace

void gemm_v4_tensor_core(const kernels::GemmArgs& args, Stream stream) {
  gemm_detail::check_args(args, "gemm_v4_tensor_core");
  if (args.dtype == kernels::KernelDType::F16 && gemm_detail::handle_degenerate<element::F16>(args, stream)) return;
  if (args.dtype == kernels::KernelDType::BF16 && gemm_detail::handle_degenerate<element::BF16>(args, stream)) return;
  tensor_core::launch_for_layout<V4Kernel>("gemm_v4_kernel", args, kStageElements * sizeof(std::uint16_t), stream);
}

}  // namespace mt::MT_KERNEL_NS
