// GEMM ladder, version 8: thread block clusters and TMA multicast.
//
// What: as v7 — f16/bf16, every layout, batched, ragged edges, the bias +
//   activation epilogue — on sm_90a (and on `sim`); same operand rules.
// Algorithm: v7's blocks each load their own A (128 x 64) and B (256 x 64)
//   slices; two blocks side by side in M load the same B twice, through L2.
//   v8 launches the grid in clusters of 2 blocks (cudaLaunchKernelEx with a
//   cluster dimension), which Hopper places on neighbouring SMs and lets
//   read and signal each other's shared memory. The pair owns a 256 x 256
//   unit of C — block rank r its 128-row half — and shares its B slice:
//     * each block's producer loads its own A and *half* of B (128 of the
//       256 n), multicast (cp.async.bulk.tensor ... .multicast::cluster,
//       cta mask 0b11) into the same stage of both blocks, so every B byte
//       leaves L2 once per pair. A block's full[stage] therefore expects
//       48 KB: its A, its own half of B and the other block's half;
//     * a stage may be refilled only when the consumers of *both* blocks are
//       done with it (the refill writes into both): each consumer warp
//       arrives on empty[stage] here and, through mapa, on the other
//       block's (16 arrivals free a stage);
//     * the blocks meet at a cluster barrier after initialising their
//       mbarriers (fence.mbarrier_init first) and again before exiting, so
//       neither leaves while the other can still write into it.
//   Units go in v7's grouped order, in pairs of tile-rows.
// Precision: f32 accumulation in the Tensor Cores; bias + activation in f32;
//   one rounding to f16/bf16 on store.
// Bound: compute-bound; the pair halves B's L2 -> shared traffic. Not done:
//   TMA stores of the epilogue (the accumulators go straight to global
//   memory, as in v6/v7), larger clusters.
// Speed: not measured yet (no GPU run since it was written); on `sim`, whose
//   clusters run a pair's blocks together, it is checked element by element
//   against the CPU reference.
#include "kernels/gemm/ladder/warp_specialized.h"

namespace mt::MT_KERNEL_NS {
namespace {

template <typename E, bool TransA, bool TransB>
struct LaunchV8 {
  static void run(const kernels::GemmArgs& args, Stream stream) {
    warp_specialized::launch_kernel<E, 2, TransA, TransB>("gemm_v8_kernel", args, stream);
  }
};

}  // namespace

void gemm_v8_clusters(const kernels::GemmArgs& args, Stream stream) {
  hopper::run<LaunchV8>("gemm_v8_clusters", args, stream);
}

}  // namespace mt::MT_KERNEL_NS
