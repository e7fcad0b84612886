// A seeded generator: a Philox key (the seed) plus an offset into its stream.
// Each random op consumes a range of blocks and advances the offset, so a
// run with the same seed replays the same numbers on CPU and CUDA.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/tensor.h"

namespace mt {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in Philox blocks
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  GeneratorState state() const;
  void set_state(GeneratorState state);
  // Reserves `blocks` Philox blocks and returns (seed, first block).
  GeneratorState reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

// Uniform [0, 1) and standard normal tensors (floating dtypes).
Tensor rand(const Shape& shape, DType dtype = kF32, Device device = kCPU, Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = kF32, Device device = kCPU, Generator* gen = nullptr);
// Uniform in [low, high).
Tensor uniform(const Shape& shape, double low, double high, DType dtype = kF32, Device device = kCPU,
               Generator* gen = nullptr);
// A random permutation of 0..n-1 (i64), e.g. for shuffling a dataset.
Tensor randperm(int64_t n, Generator* gen = nullptr);

}  // namespace mt
