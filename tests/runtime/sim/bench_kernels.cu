// Kernels for bench_switch: as little work as possible between switches.
#include "runtime/launch.h"
#include "tests/runtime/sim/bench_kernels.h"

namespace mt::sim::bench {

__global__ void barrier_loop_kernel(int barriers) {
  for (int i = 0; i < barriers; ++i) __syncthreads();
}

void barrier_loop(int blocks, int threads, int barriers) {
  launch("barrier_loop_kernel", barrier_loop_kernel, dim3(blocks), dim3(threads), 0, Stream{}, barriers);
}

}  // namespace mt::sim::bench
