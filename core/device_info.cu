// The CUDA backend's first translation unit: device discovery.
//
// It proves the toolchain builds CUDA code in CI (where there is no GPU) and
// gives the CLI something true to print. Asking for CUDA without a usable GPU
// yields a clear message instead of a raw CUDA error code.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "core/device_info.h"

namespace mt::cuda {

DeviceSummary query_devices() {
  DeviceSummary summary;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    summary.error = cudaGetErrorString(status);  // callers say "no CUDA device available: <this>"
    cudaGetLastError();  // clear the sticky error so later calls are not poisoned
    return summary;
  }
  summary.count = count;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    summary.names.push_back(std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                            ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB)");
  }
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  summary.runtime_version = runtime;
  return summary;
}

std::optional<GpuIdentity> query_identity(int index, std::string* why) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count) {
    cudaGetLastError();
    if (why != nullptr) *why = "no CUDA device " + std::to_string(index) + " (" + std::to_string(count) + " visible)";
    return std::nullopt;
  }
  GpuIdentity identity;
  char name[256] = {};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) std::snprintf(name, sizeof(name), "%s", prop.name);
  identity.name = name;
  cudaDeviceGetAttribute(&identity.major, cudaDevAttrComputeCapabilityMajor, index);
  cudaDeviceGetAttribute(&identity.minor, cudaDevAttrComputeCapabilityMinor, index);
  cudaDriverGetVersion(&identity.driver_version);
  cudaGetLastError();
  return identity;
}

}  // namespace mt::cuda
