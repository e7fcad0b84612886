// Tensor helpers for the SIM-device tests: the same random data on the CPU
// and on the sim device, and a max-abs-difference against the CPU result.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/tensor.h"

namespace mt::test {

// The device the CUDA-path tests run on: the GPU when this machine has one
// (so a GPU check runs every case natively), else the sim device, which runs
// the same kernels in the SIMT simulator. MT_TEST_DEVICE=sim forces the sim.
inline Device cuda_path_device() {
  const char* forced = std::getenv("MT_TEST_DEVICE");
  if (forced != nullptr && std::string(forced) == "sim") return kSIM;
  try {
    allocator_for(kCUDA);
    return kCUDA;
  } catch (const Error&) {
    return kSIM;
  }
}
inline const Device kCudaPath = cuda_path_device();

inline Tensor random_tensor(const Shape& shape, DType dtype, Device device, unsigned seed, double lo = -1,
                            double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return from_vector(v, shape, dtype, device);
}

// max |a - b| / (1 + max |b|) over all elements, both read as doubles.
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to(kCPU).to_vector(), vb = b.to(kCPU).to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return std::isnan(diff) ? INFINITY : diff / (1 + scale);
}

inline double dtype_tolerance(DType t) { return t == kF64 ? 1e-12 : t == kF32 ? 1e-5 : t == kF16 ? 4e-3 : 2e-2; }

// Uniform values in [lo, hi) on the CPU, the same for every run of a seed.
inline Tensor random_cpu(const Shape& shape, DType dtype, unsigned seed, double lo = -2, double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return from_vector(v, shape, dtype);
}

// |sim - cpu| <= tol * (1 + |cpu|) elementwise (NaN must match NaN); names the first bad element.
inline void check_matches(const Tensor& on_sim, const Tensor& on_cpu, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(on_sim.defined());
  REQUIRE(on_cpu.defined());
  CHECK(on_sim.device() == kCudaPath);
  CHECK(on_sim.dtype() == on_cpu.dtype());
  REQUIRE(on_sim.sizes() == on_cpu.sizes());
  const std::vector<double> got = on_sim.to(kCPU).to_vector(), want = on_cpu.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(want[i]) && std::isnan(got[i])) ||
                    std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])) ||
                    (std::isinf(want[i]) && got[i] == want[i]);
    if (!ok) {
      FAIL_CHECK("element " << i << ": sim " << got[i] << " vs cpu " << want[i]);
      return;
    }
  }
}

// Sets an environment variable for one scope; restores the old value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace mt::test
