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
//     * Persistent: the grid is one block per SM (4 on the simulator), and
//       each block walks tiles blockIdx.x, + gridDim.x, ... The stage ring
//       and its phase parities carry on from tile to tile, so the producer
//       is already loading the next tile while the consumers store this
//       one's accumulators. Tiles go in groups of 8 tile-rows, column by
//       column, so blocks running together share A rows and B columns in L2.
//   4 stages x 48 KB (A 128 x 64 + B 256 x 64) of 128-byte-swizzled shared
//   memory, the layouts and descriptors of hopper_tiles.h. The kernel itself
//   is warp_specialized.h, shared with v8 (which runs it in pairs of blocks).
// Precision: f32 accumulation in the Tensor Cores; bias + activation in f32;
//   one rounding to f16/bf16 on store.
// Bound: compute-bound at 4096^3. Left for v8: 2-CTA clusters sharing tiles
//   through TMA multicast, TMA stores of the epilogue.
// Speed: not measured yet (no GPU run since it was written); on `sim` it is
//   checked element by element against the CPU reference.
#include "kernels/gemm/ladder/warp_specialized.h"

namespace mt::MT_KERNEL_NS {
namespace {

template <typename E, bool TransA, bool TransB>
struct LaunchV7 {
  static void run(const kernels::GemmArgs& args, Stream stream) {
    warp_specialized::launch_kernel<E, 1, TransA, TransB>("gemm_v7_kernel", args, stream);
  }
};

}  // namespace

void gemm_v7_warp_specialized(const kernels::GemmArgs& args, Stream stream) {
  hopper::run<LaunchV7>("gemm_v7_warp_specialized", args, stream);
}

}  // namespace mt::MT_KERNEL_NS
