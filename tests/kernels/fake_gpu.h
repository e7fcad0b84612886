// The simulator standing for a GPU in kernel-verification tests
// (kernels/verify/trust.h): MT_SIM_GPU_IDENTITY set to `identity`, and a
// results cache of this process's own (ctest runs test processes in
// parallel); both undone, and the trust table forgotten, on exit.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/verify/trust.h"

namespace mt::test {

struct FakeGpu {
  std::filesystem::path cache_dir;
  explicit FakeGpu(const char* identity = "NVIDIA H200;9.0;13000") {
    cache_dir = std::filesystem::temp_directory_path() / ("mt_fake_gpu_" + std::to_string(::getpid()));
    std::filesystem::remove_all(cache_dir);
    ::setenv("MT_CACHE_DIR", cache_dir.c_str(), 1);
    ::setenv("MT_SIM_GPU_IDENTITY", identity, 1);
    kernels::verify::forget_trust();
  }
  ~FakeGpu() {
    ::unsetenv("MT_SIM_GPU_IDENTITY");
    ::unsetenv("MT_CACHE_DIR");
    std::filesystem::remove_all(cache_dir);
    kernels::verify::forget_trust();
  }
  FakeGpu(const FakeGpu&) = delete;
  FakeGpu& operator=(const FakeGpu&) = delete;
  kernels::verify::DeviceIdentity identity() const { return *kernels::verify::identity_for(kSIM); }
  void store(kernels::verify::OwnFamily family, kernels::verify::CheckOutcome outcome) const {
    kernels::verify::store_results(identity(), {kernels::verify::CheckResult{family, outcome, 0.1, ""}});
  }
};

}  // namespace mt::test
