// The warp-specialised, persistent Hopper GEMM of v7 and v8 (private to
// kernels/gemm/ladder): v7 instantiates it with clusters of one block, v8 with
// clusters of two that share their B tiles by TMA multicast. What each rung
// adds is explained in its own file; the `if constexpr (kPair)` branches
// below are exactly v8's difference.
//
// Block: 3 warpgroups. Warpgroup 0 produces (one thread issues TMA), 1 and 2
// consume (wgmma m64n256k16, 64 rows each of the 128 x 256 block tile).
// Stages: 4 x (A 128 x 64 + B 256 x 64) in 128-byte-swizzled shared memory,
// each with a `full` barrier (the producer's arrival + the bytes) and an
// `empty` barrier (one arrival per consumer warp that has finished it).
#pragma once

#include <stdexcept>

#include "kernels/gemm/ladder/hopper_tiles.h"

namespace mt::MT_KERNEL_NS::warp_specialized {

using namespace hopper;

constexpr int kBlockM = 128, kBlockN = 256, kStages = 4;
constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
constexpr int kConsumerWarps = 4 * kConsumers;
constexpr int kGroupRows = 8;  // tile-rows per group of the tile order
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
static_assert(128 * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536, "the register file holds them");
constexpr int kStageElements = (kBlockM + kBlockN) * kBlockK;
constexpr unsigned kStageBytes = kStageElements * sizeof(uint16_t);
constexpr std::size_t kSharedBytes = kStages * kStageBytes + 2 * kStages * sizeof(uint64_t) + 1024;

struct Problem {
  kernels::GemmArgs args;
  bool batched = false;
  int tiles_m = 0, tiles_n = 0;  // block tiles per batch
  int units = 0;                 // what the clusters walk: tiles (v7) or pairs of tiles stacked in M (v8)
};

struct Tile {
  int batch, row, col;  // first row and column of C
};

// Unit u in the grouped order: within a batch, groups of kGroupRows
// tile-rows; inside a group, down a column of units, then the next column.
// A unit is ClusterM tiles stacked in M; block `rank` of the cluster takes
// the rank-th (a unit hanging past M computes zeros and stores nothing).
template <int ClusterM>
__device__ __forceinline__ Tile tile_at(const Problem& p, int u, unsigned rank) {
  const int unit_rows = (p.tiles_m + ClusterM - 1) / ClusterM;
  const int per_batch = unit_rows * p.tiles_n;
  const int batch = u / per_batch, r = u % per_batch;
  constexpr int kGroupUnits = kGroupRows / ClusterM;
  const int group_units = kGroupUnits * p.tiles_n;
  const int first_row = (r / group_units) * kGroupUnits;
  const int rows = min(unit_rows - first_row, kGroupUnits);
  const int within = r % group_units;
  const int unit_row = first_row + within % rows;
  return {batch, (unit_row * ClusterM + static_cast<int>(rank)) * kBlockM, (within / rows) * kBlockN};
}

// The producer's one thread: every K slice of every unit of this cluster,
// each into the next stage once the consumers (of both blocks, with pairs)
// have freed it. With pairs, each block loads its own A and half of the
// shared B tile, multicast into the same stage of both blocks.
template <int ClusterM, bool TransA, bool TransB>
__device__ void produce(uint16_t* stages, uint64_t* full, uint64_t* empty, const kernels::TensorMap* map_a,
                        const kernels::TensorMap* map_b, const Problem& p, int first_unit, int unit_step,
                        unsigned rank) {
  constexpr bool kPair = ClusterM > 1;
  constexpr int kBRows = kBlockN / ClusterM;  // B rows (n) this block loads
  const int slices = (p.args.k + kBlockK - 1) / kBlockK;
  int it = 0;
  for (int u = first_unit; u < p.units; u += unit_step) {
    const Tile tile = tile_at<ClusterM>(p, u, rank);
    for (int slice = 0; slice < slices; ++slice, ++it) {
      const int stage = it % kStages;
      // A stage's first use needs no wait: parity 1 of a fresh barrier counts as done.
      ptx::mbarrier_wait(&empty[stage], (static_cast<unsigned>(it / kStages) & 1u) ^ 1u);
      uint16_t* a = stages + stage * kStageElements;
      uint16_t* b = a + kBlockM * kBlockK + rank * kBRows * kBlockK;
      const int k0 = slice * kBlockK, b_row0 = tile.col + static_cast<int>(rank) * kBRows;
      // This block's full barrier takes all of its stage: A and both halves of B.
      ptx::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
      load_operand<!TransA, kBlockM>(a, map_a, tile.row, k0, tile.batch, p.batched, &full[stage]);
      if constexpr (kPair) {
        load_operand_multicast<TransB, kBRows>(b, map_b, b_row0, k0, tile.batch, p.batched, &full[stage],
                                               (1u << ClusterM) - 1);
      } else {
        load_operand<TransB, kBRows>(b, map_b, b_row0, k0, tile.batch, p.batched, &full[stage]);
      }
    }
  }
}

// A consumer warpgroup: 64 rows of every tile of this block.
template <typename E, int ClusterM, bool TransA, bool TransB>
__device__ void consume(const uint16_t* stages, uint64_t* full, uint64_t* empty, const Problem& p, int first_unit,
                        int unit_step, unsigned rank, int consumer) {
  const int slices = (p.args.k + kBlockK - 1) / kBlockK;
  const bool warp_leader = threadIdx.x % 32 == 0;
  // Frees a stage: in this block, and (pairs) in the other, whose producer
  // multicasts into this block's copy of it too.
  auto release = [&](int stage) {
    if (!warp_leader) return;
    for (unsigned other = 0; other < static_cast<unsigned>(ClusterM); ++other) {
      if (other == rank) {
        ptx::mbarrier_arrive(&empty[stage]);
      } else {
        ptx::mbarrier_arrive_cluster(&empty[stage], other);
      }
    }
  };
  int it = 0;
  for (int u = first_unit; u < p.units; u += unit_step) {
    const Tile tile = tile_at<ClusterM>(p, u, rank);
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
      if (slice > 0) release((it - 1) % kStages);
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_accumulators(acc);
    release((it - 1) % kStages);
    store_fragment<E, kBlockN>(p.args, tile.batch, tile.row + consumer * 64, tile.col, acc);
  }
}

template <typename E, int ClusterM, bool TransA, bool TransB>
__global__ void __launch_bounds__(kThreads, 1) kernel(const __grid_constant__ kernels::TensorMap map_a,
                                                      const __grid_constant__ kernels::TensorMap map_b, Problem p) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  uint16_t* stages = aligned_tiles(raw);
  auto* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageElements);
  uint64_t* empty = full + kStages;
  const unsigned rank = ClusterM > 1 ? ptx::cluster_ctarank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps * ClusterM);
    }
  }
  // The last block-wide barrier: from here on only mbarriers. With pairs the
  // other block must see these barriers initialised before it multicasts
  // into this one or arrives on them.
  if constexpr (ClusterM > 1) {
    if (threadIdx.x == 0) ptx::fence_mbarrier_init_cluster();
    ptx::cluster_sync();
  } else {
    __syncthreads();
  }
  const int cluster = static_cast<int>(blockIdx.x) / ClusterM, clusters = static_cast<int>(gridDim.x) / ClusterM;
  const int warpgroup = static_cast<int>(threadIdx.x / 128);
  if (warpgroup == 0) {
    ptx::setmaxnreg<kProducerRegisters, false>();
    if (threadIdx.x == 0) {
      produce<ClusterM, TransA, TransB>(stages, full, empty, &map_a, &map_b, p, cluster, clusters, rank);
    }
  } else {
    ptx::setmaxnreg<kConsumerRegisters, true>();
    consume<E, ClusterM, TransA, TransB>(stages, full, empty, p, cluster, clusters, rank, warpgroup - 1);
  }
  // With pairs, neither block may leave while the other can still multicast
  // into it or arrive on its barriers.
  if constexpr (ClusterM > 1) ptx::cluster_sync();
}

// Blocks of the persistent grid: one per SM on a GPU; on the simulator 4,
// so each walks several units and the stage ring wraps across them.
inline int resident_blocks() {
#if MT_SIM_BUILD
  return 4;
#else
  const int sms = current_device_facts().sms;
  if (sms <= 0) throw std::runtime_error("warp-specialised GEMM: cannot read the SM count");
  return sms;
#endif
}

template <typename E, int ClusterM, bool TransA, bool TransB>
void launch_kernel(const char* name, const kernels::GemmArgs& args, Stream stream) {
  const OperandMaps maps = operand_maps<kBlockM, kBlockN / ClusterM>(args);
  Problem p{args, args.batch > 1, gemm_detail::ceil_div(args.m, kBlockM), gemm_detail::ceil_div(args.n, kBlockN), 0};
  p.units = gemm_detail::ceil_div(p.tiles_m, ClusterM) * p.tiles_n * args.batch;
  const int most_clusters = resident_blocks() / ClusterM;
  const int clusters = p.units < most_clusters ? p.units : most_clusters;
  launch_clusters(name, kernel<E, ClusterM, TransA, TransB>, dim3(clusters * ClusterM), dim3(kThreads), dim3(ClusterM),
                  kSharedBytes, stream, maps.a, maps.b, p);
}

}  // namespace mt::MT_KERNEL_NS::warp_specialized
