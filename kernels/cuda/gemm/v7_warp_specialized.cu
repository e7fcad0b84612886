// GEMM ladder, version 7: warp specialisation and a persistent grid.
//
// What: as v6 — f16/bf16, every layout, batched, ragged edges, the bias +
//   activation epilogue — on sm_90a (and on `sim`); same operand rules.
// Algorithm: v6 makes every warp both wait for copies and multiply, and
//   stops the whole block at a __syncthreads per K slice so a stage can be
//   refilled. v7 gives each job its own warps and lets them talk through
//   mbarriers only:
//     * 3 warpgroups per block (384 threads). Warpgroup 0 is the producer:
//       it gives most of its registers back (setmaxnreg.dec 40) and one of
//       its threads does nothing but wait for a free stage, then ask TMA for
//       the next K slice of A and B into it (full[stage] counts the bytes).
//     * Warpgroups 1 and 2 are consumers (setmaxnreg.inc 232): each owns 64
//       rows of the 128 x 256 block tile — one wgmma m64n256k16 per k16
//       step, 128 f32 accumulators per thread. A consumer waits on
//       full[stage], multiplies, and once wgmma.wait_group<1> says the
//       previous slice's multiplies are done, each of its warps arrives on
//       empty[previous stage] (8 arrivals free a stage). Nobody waits for
//       anybody else at a block-wide barrier.
//     * Persistent: the grid is one block per SM (2 on the simulator), and
//       each block walks tiles blockIdx.x, + gridDim.x, ... The stage ring
//       and its phase parities carry on from tile to tile, so the producer
//       is already loading the next tile while the consumers store this
//       one's accumulators. Tiles go in groups of 8 tile-rows, column by
//       column, so blocks running together share A rows and B columns in L2.
//   4 stages x 48 KB (A 128 x 64 + B 256 x 64) of 128-byte-swizzled shared
//   memory, the layouts and descriptors of hopper_tiles.h.
// Precision: f32 accumulation in the Tensor Cores; bias + activation in f32;
//   one rounding to f16/bf16 on store.
// Bound: compute-bound at 4096^3. Left for v8: 2-CTA clusters sharing tiles
//   through TMA multicast, TMA stores of the epilogue.
// Speed: not measured yet (no GPU run since it was written); on `sim` it is
//   checked element by element against the CPU reference.
#include "kernels/cuda/gemm/hopper_tiles.h"

namespace mt::MT_KERNEL_NS {
namespace {

using namespace hopper;

constexpr int kBlockM = 128, kBlockN = 256, kStages = 4;
constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
constexpr int kConsumerWarps = 4 * kConsumers;  // arrivals that free a stage
constexpr int kGroupRows = 8;                   // tile-rows per group of the tile order
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
static_assert(128 * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536, "the register file holds them");
constexpr int kStageElements = (kBlockM + kBlockN) * kBlockK;
constexpr unsigned kStageBytes = kStageElements * sizeof(uint16_t);
constexpr std::size_t kSharedBytes = kStages * kStageBytes + 2 * kStages * sizeof(uint64_t) + 1024;

struct Problem {
  kernels::GemmArgs args;
  bool batched = false;
  int tiles_m = 0, tiles_n = 0, tiles = 0;  // tiles = tiles_m * tiles_n * batch
};

struct Tile {
  int batch, row, col;  // first row and column of C
};

// Tile t in the grouped order: within a batch, groups of kGroupRows
// tile-rows; inside a group, down a column of tiles, then the next column.
__device__ __forceinline__ Tile tile_at(const Problem& p, int t) {
  const int per_batch = p.tiles_m * p.tiles_n;
  const int batch = t / per_batch, r = t % per_batch;
  const int group_tiles = kGroupRows * p.tiles_n;
  const int first_row = (r / group_tiles) * kGroupRows;
  const int rows = min(p.tiles_m - first_row, kGroupRows);
  const int within = r % group_tiles;
  return {batch, (first_row + within % rows) * kBlockM, (within / rows) * kBlockN};
}

// The producer's one thread: every K slice of every tile of this block, each
// into the next stage once the consumers have freed it.
template <bool TransA, bool TransB>
__device__ void produce(uint16_t* stages, uint64_t* full, uint64_t* empty, const kernels::TensorMap* map_a,
                        const kernels::TensorMap* map_b, const Problem& p) {
  const int slices = (p.args.k + kBlockK - 1) / kBlockK;
  int it = 0;
  for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
    const Tile tile = tile_at(p, t);
    for (int slice = 0; slice < slices; ++slice, ++it) {
      const int stage = it % kStages;
      // A stage's first use needs no wait: parity 1 of a fresh barrier counts as done.
      ptx::mbarrier_wait(&empty[stage], (static_cast<unsigned>(it / kStages) & 1u) ^ 1u);
      uint16_t* dst = stages + stage * kStageElements;
      ptx::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
      load_operand<!TransA, kBlockM>(dst, map_a, tile.row, slice * kBlockK, tile.batch, p.batched, &full[stage]);
      load_operand<TransB, kBlockN>(dst + kBlockM * kBlockK, map_b, tile.col, slice * kBlockK, tile.batch, p.batched,
                                    &full[stage]);
    }
  }
}

// A consumer warpgroup: 64 rows of every tile of this block.
template <typename E, bool TransA, bool TransB>
__device__ void consume(const uint16_t* stages, uint64_t* full, uint64_t* empty, const Problem& p, int consumer) {
  const int slices = (p.args.k + kBlockK - 1) / kBlockK;
  const bool warp_leader = threadIdx.x % 32 == 0;
  int it = 0;
  for (int t = static_cast<int>(blockIdx.x); t < p.tiles; t += static_cast<int>(gridDim.x)) {
    const Tile tile = tile_at(p, t);
    float acc[kBlockN / 2];  // the first k16 step does not accumulate (see v6)
    for (int slice = 0; slice < slices; ++slice, ++it) {
      const int stage = it % kStages;
      ptx::mbarrier_wait(&full[stage], static_cast<unsigned>(it / kStages) & 1u);
      const uint16_t* a = stages + stage * kStageElements + consumer * kBoxElements;
      const uint16_t* b = stages + stage * kStageElements + kBlockM * kBlockK;
      ptx::fence_accumulators(acc);
      ptx::wgmma_fence();
      MT_UNROLL
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        ptx::wgmma_m64k16<kBlockN, kIsBf16<E>, TransA, !TransB>(acc, operand_descriptor<!TransA>(a, kk),
                                                                operand_descriptor<TransB>(b, kk), slice > 0 || kk > 0);
      }
      ptx::wgmma_commit_group();
      ptx::fence_accumulators(acc);
      ptx::wgmma_wait_group<1>();  // the previous slice's multiplies are done: free its stage
      if (slice > 0 && warp_leader) ptx::mbarrier_arrive(&empty[(it - 1) % kStages]);
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_accumulators(acc);
    if (warp_leader) ptx::mbarrier_arrive(&empty[(it - 1) % kStages]);
    store_fragment<E, kBlockN>(p.args, tile.batch, tile.row + consumer * 64, tile.col, acc);
  }
}

template <typename E, bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_v7_kernel(const __grid_constant__ kernels::TensorMap map_a, const __grid_constant__ kernels::TensorMap map_b,
                   Problem p) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  uint16_t* stages = aligned_tiles(raw);
  auto* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageElements);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
  }
  __syncthreads();  // the last block-wide barrier: from here on only mbarriers
  const int warpgroup = static_cast<int>(threadIdx.x / 128);
  if (warpgroup == 0) {
    ptx::setmaxnreg<kProducerRegisters, false>();
    if (threadIdx.x == 0) produce<TransA, TransB>(stages, full, empty, &map_a, &map_b, p);
  } else {
    ptx::setmaxnreg<kConsumerRegisters, true>();
    consume<E, TransA, TransB>(stages, full, empty, p, warpgroup - 1);
  }
}

// Blocks of the persistent grid: one per SM on a GPU; on the simulator 2,
// so each walks several tiles and the stage ring wraps across tiles.
int resident_blocks() {
#if MT_SIM_BUILD
  return 2;
#else
  const int sms = current_device_facts().sms;
  if (sms <= 0) throw std::runtime_error("gemm_v7_warp_specialized: cannot read the SM count");
  return sms;
#endif
}

template <typename E, bool TransA, bool TransB>
struct LaunchV7 {
  static void run(const kernels::GemmArgs& args, Stream stream) {
    const OperandMaps maps = operand_maps<kBlockM, kBlockN>(args);
    Problem p{args, args.batch > 1, gemm_detail::ceil_div(args.m, kBlockM), gemm_detail::ceil_div(args.n, kBlockN), 0};
    p.tiles = p.tiles_m * p.tiles_n * args.batch;
    const int blocks = p.tiles < resident_blocks() ? p.tiles : resident_blocks();
    launch("gemm_v7_kernel", gemm_v7_kernel<E, TransA, TransB>, dim3(blocks), dim3(kThreads), kSharedBytes, stream,
           maps.a, maps.b, p);
  }
};

}  // namespace

void gemm_v7_warp_specialized(const kernels::GemmArgs& args, Stream stream) {
  hopper::run<LaunchV7>("gemm_v7_warp_specialized", args, stream);
}

}  // namespace mt::MT_KERNEL_NS
