// Wall-clock timing of GPU work for the kernel benchmarks (bench/*_bench.cpp).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <functional>

namespace mt::bench {

// Milliseconds per call of `fn`, averaged over as many calls as fill
// `min_ms` after one warm-up call (which also lets the caching allocator
// fill); the device is synchronized around the timed calls.
inline double time_ms(const std::function<void()>& fn, double min_ms) {
  fn();
  cudaDeviceSynchronize();
  int iterations = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    fn();
    ++iterations;
    cudaDeviceSynchronize();
    elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_ms);
  return elapsed / iterations;
}

}  // namespace mt::bench
