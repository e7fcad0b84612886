#include "core/generator.h"

#include <numeric>

#include "core/philox.h"

namespace mt {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  state_ = {seed, 0};
}

GeneratorState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard lock(mutex_);
  state_ = state;
}

GeneratorState Generator::reserve(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  GeneratorState out = state_;
  state_.offset += blocks;
  return out;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

template <typename Sample>
Tensor fill_random(const Shape& shape, DType dtype, Device device, Generator* gen, uint64_t per_block,
                   Sample&& sample) {
  MT_CHECK(is_compute_float(dtype), "random tensors must be f64, f32, f16 or bf16, got {}", dtype);
  // The same Philox stream everywhere: drawn on the host, then moved to a GPU.
  if (!device.host_accessible()) return host_to_device(fill_random(shape, dtype, kCPU, gen, per_block, sample), device);
  Tensor t = empty(shape, dtype, device);
  const auto n = static_cast<uint64_t>(t.numel());
  const GeneratorState s = (gen ? *gen : default_generator()).reserve((n + per_block - 1) / per_block);
  for (uint64_t i = 0; i < n; ++i) write_element(t, static_cast<int64_t>(i), sample(s, i));
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return fill_random(shape, dtype, device, gen, 4,
                     [](GeneratorState s, uint64_t i) { return philox_uniform(s.seed, s.offset, i); });
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device, Generator* gen) {
  MT_CHECK(low <= high, "uniform: low {} is above high {}", low, high);
  return fill_random(shape, dtype, device, gen, 4, [&](GeneratorState s, uint64_t i) {
    return low + (high - low) * static_cast<double>(philox_uniform(s.seed, s.offset, i));
  });
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return fill_random(shape, dtype, device, gen, 2,
                     [](GeneratorState s, uint64_t i) { return philox_normal(s.seed, s.offset, i); });
}

Tensor randperm(int64_t n, Generator* gen) {
  MT_CHECK(n >= 0, "randperm: n must be non-negative, got {}", n);
  Tensor t = empty({n}, kI64);
  int64_t* p = t.data<int64_t>();
  std::iota(p, p + n, int64_t{0});
  // Fisher-Yates with Philox words: reproducible from the seed alone.
  const GeneratorState s = (gen ? *gen : default_generator()).reserve(static_cast<uint64_t>(n + 1) / 2 + 1);
  for (int64_t i = n - 1; i > 0; --i) {
    const PhiloxBlock b = philox4x32_10(s.seed, s.offset + static_cast<uint64_t>(i) / 2);
    const uint64_t r = (static_cast<uint64_t>(b.word[(i % 2) * 2]) << 32) | b.word[(i % 2) * 2 + 1];
    std::swap(p[i], p[r % static_cast<uint64_t>(i + 1)]);
  }
  return t;
}

}  // namespace mt
