// Prints how many fiber context switches per second the simulator sustains,
// on a kernel that does nothing but hit barriers (worst case for the
// simulator: every __syncthreads() is one switch out and one back per thread).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "runtime/sim/runtime.h"
#include "tests/runtime/sim/bench_kernels.h"

int main(int argc, char** argv) {
  const int barriers = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int threads = 256;
  const int blocks = 8;
  mt::sim::bench::barrier_loop(1, threads, 10);  // warm up stacks and arenas
  const auto before = mt::simulator::context_switch_count();
  const auto start = std::chrono::steady_clock::now();
  mt::sim::bench::barrier_loop(blocks, threads, barriers);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto switches = mt::simulator::context_switch_count() - before;
  std::printf("%d blocks x %d threads x %d barriers: %llu switches in %.3f s = %.1f million switches/s "
              "(%.1f ns per switch, scheduling included)\n",
              blocks, threads, barriers, static_cast<unsigned long long>(switches), seconds,
              switches / seconds / 1e6, seconds * 1e9 / switches);
  return 0;
}
