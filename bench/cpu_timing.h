// Wall-clock timing for the CPU benchmarks (bench/timing.h is the GPU's,
// with CUDA events).
#pragma once

#include <chrono>
#include <functional>

namespace mt::bench {

// Milliseconds per call of fn over at least min_ms, after one warm-up call.
inline double time_ms(const std::function<void()>& fn, double min_ms) {
  fn();
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_ms);
  return elapsed / calls;
}

}  // namespace mt::bench
