// GEMM ladder, version 6: Hopper's own instructions — TMA tile loads and
// wgmma from shared memory.
//
// What: as v5 — f16/bf16 inputs, every layout (NN/NT/TN/TT), batched, ragged
//   edges, the bias + activation epilogue — on sm_90a (and on `sim`).
//   Operands must suit TMA: 16-byte aligned base, leading dimension and batch
//   stride multiples of 8 elements; gemm() sends anything else to v5.
// Algorithm: one warpgroup (128 threads) owns a 128 x 128 tile of C and
//   walks K in slices of 64, through 4 shared-memory stages of A and B
//   (32 KB each). Per slice:
//     * thread 0 asks TMA for the slice's boxes (cp.async.bulk.tensor with a
//       tensor map, 128-byte swizzle), arriving on the stage's mbarrier with
//       the 32 KB it expects; the copy engine fills the tile, zero-filling
//       past the matrix edges, and completes those bytes on the barrier —
//       no thread spends an instruction on address arithmetic or stores;
//     * everyone waits on the stage's barrier (phase parity = use count % 2),
//       then issues 4 k16 steps x 2 m64 slabs of wgmma.mma_async m64n128k16
//       whose matrix descriptors point straight into the swizzled tiles
//       (no ldmatrix: the Tensor Cores read shared memory themselves);
//     * wgmma.wait_group<1> lets the slice just issued run on while it
//       confirms the previous slice's multiplies are done; after a
//       __syncthreads thread 0 refills that stage with the slice 4 ahead.
//   The 128-byte swizzle (16-byte chunk c of 128-byte row r stored at chunk
//   c ^ (r % 8)) is what TMA writes and what the descriptors tell wgmma to
//   read: rows of a K-major tile, or k-rows of an M/N-major one, spread over
//   all banks without the padding v4/v5 needed.
//   Layouts: A row-major is K-major for wgmma (one 64 x 128 box), A stored
//   transposed is M-major (two 64 x 64 boxes, wgmma's transpose bit set);
//   likewise B stored N x K is K-major, B row-major (K x N) N-major.
// Precision: f32 accumulation in the Tensor Cores (64 x 2 registers per
//   thread); bias + activation in f32; one rounding to f16/bf16 on store.
// Bound: compute-bound at 4096^3. v7 adds what is still missing against
//   cuBLASLt: a producer warp that only loads (warp specialisation) so the
//   multiplying warps never stop for a __syncthreads, two consumer
//   warpgroups, and a persistent grid.
// Speed: not measured yet (no GPU run since it was written); on `sim` it is
//   checked element by element against the CPU reference.
#include "kernels/gemm/ladder/hopper_tiles.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace hopper;

constexpr int kBlockM = 128, kBlockN = 128, kStages = 4, kThreads = 128;
constexpr int kSlabs = kBlockM / 64;  // the warpgroup's two m64 wgmmas per k16 step
constexpr int kStageElements = (kBlockM + kBlockN) * kBlockK;
constexpr unsigned kStageBytes = kStageElements * sizeof(uint16_t);
constexpr std::size_t kSharedBytes = kStages * kStageBytes + kStages * sizeof(uint64_t) + 1024;  // + alignment slack

struct Problem {
  kernels::GemmArgs args;
  bool batched = false;  // 3-d tensor maps (batch outermost)
};

// Thread 0: K slice `slice` of this block's A and B into `stage`, 32 KB on `full`.
template <bool TransA, bool TransB>
__device__ __forceinline__ void load_slice(uint16_t* stage, const kernels::TensorMap* map_a,
                                           const kernels::TensorMap* map_b, const Problem& p, int block_row,
                                           int block_col, int slice, uint64_t* full) {
  const int batch = static_cast<int>(blockIdx.z), k0 = slice * kBlockK;
  ptx::mbarrier_arrive_expect_tx(full, kStageBytes);
  load_operand<!TransA, kBlockM>(stage, map_a, block_row, k0, batch, p.batched, full);
  load_operand<TransB, kBlockN>(stage + kBlockM * kBlockK, map_b, block_col, k0, batch, p.batched, full);
}

template <typename E, bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads)
    gemm_v6_kernel(const __grid_constant__ kernels::TensorMap map_a, const __grid_constant__ kernels::TensorMap map_b,
                   Problem p) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  uint16_t* stages = aligned_tiles(raw);
  auto* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageElements);
  const int block_row = static_cast<int>(blockIdx.y) * kBlockM;
  const int block_col = static_cast<int>(blockIdx.x) * kBlockN;
  const int slices = (p.args.k + kBlockK - 1) / kBlockK;
  const bool leader = threadIdx.x == 0;

  if (leader) {
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&full[s], 1);
  }
  __syncthreads();
  if (leader) {
    for (int s = 0; s < kStages && s < slices; ++s) {
      load_slice<TransA, TransB>(stages + s * kStageElements, &map_a, &map_b, p, block_row, block_col, s, &full[s]);
    }
  }

  // Not zeroed: the first k16 step multiplies without accumulating (scale-d
  // 0), so no ordinary instruction writes the registers wgmma owns.
  float acc[kSlabs][kBlockN / 2];
  for (int slice = 0; slice < slices; ++slice) {
    const int stage = slice % kStages;
    ptx::mbarrier_wait(&full[stage], static_cast<unsigned>(slice / kStages) & 1u);
    const uint16_t* a = stages + stage * kStageElements;
    const uint16_t* b = a + kBlockM * kBlockK;
    MT_UNROLL
    for (int slab = 0; slab < kSlabs; ++slab) ptx::fence_accumulators(acc[slab]);
    ptx::wgmma_fence();
    MT_UNROLL
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint64_t desc_b = operand_descriptor<TransB>(b, kk);
      MT_UNROLL
      for (int slab = 0; slab < kSlabs; ++slab) {
        ptx::wgmma_m64k16<kBlockN, kIsBf16<E>, TransA, !TransB>(
            acc[slab], operand_descriptor<!TransA>(a + slab * kBoxElements, kk), desc_b, slice > 0 || kk > 0);
      }
    }
    ptx::wgmma_commit_group();
    MT_UNROLL
    for (int slab = 0; slab < kSlabs; ++slab) ptx::fence_accumulators(acc[slab]);
    // The previous slice's multiplies are done (this one may still run):
    // its stage can be refilled once every warp has got here.
    ptx::wgmma_wait_group<1>();
    __syncthreads();
    const int refill = slice - 1 + kStages;
    if (leader && slice >= 1 && refill < slices) {
      const int free_stage = (slice - 1) % kStages;
      load_slice<TransA, TransB>(stages + free_stage * kStageElements, &map_a, &map_b, p, block_row, block_col, refill,
                                 &full[free_stage]);
    }
  }
  ptx::wgmma_wait_group<0>();
  MT_UNROLL
  for (int slab = 0; slab < kSlabs; ++slab) {
    ptx::fence_accumulators(acc[slab]);
    store_fragment<E, kBlockN>(p.args, static_cast<int>(blockIdx.z), block_row + slab * 64, block_col, acc[slab]);
  }
}

template <typename E, bool TransA, bool TransB>
struct LaunchV6 {
  static void run(const kernels::GemmArgs& args, Stream stream) {
    const OperandMaps maps = operand_maps<kBlockM, kBlockN>(args);
    const dim3 grid(gemm_detail::ceil_div(args.n, kBlockN), gemm_detail::ceil_div(args.m, kBlockM), args.batch);
    launch("gemm_v6_kernel", gemm_v6_kernel<E, TransA, TransB>, grid, dim3(kThreads), kSharedBytes, stream, maps.a,
           maps.b, Problem{args, args.batch > 1});
  }
};

}  // namespace

bool gemm_hopper_supports(const kernels::GemmArgs& args) { return hopper::supports(args); }

void gemm_v6_tma_wgmma(const kernels::GemmArgs& args, Stream stream) {
  hopper::run<LaunchV6>("gemm_v6_tma_wgmma", args, stream);
}

}  // namespace mt::MT_KERNEL_NS
