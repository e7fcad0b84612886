// What CUDA devices this process can see (built only when CUDA is enabled).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mt::cuda {

struct DeviceSummary {
  int count = 0;
  int runtime_version = 0;
  std::vector<std::string> names;
  std::string error;  // why there are no devices, when there are none
};

DeviceSummary query_devices();

// One GPU as kernel verification keys its results (kernels/verify/trust.h):
// what the chip is and which driver runs it.
struct GpuIdentity {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int driver_version = 0;    // e.g. 13000 for 13.0
};

// Device `index`'s identity, from device attributes and the driver version
// only: by the CUDA runtime's documentation none of these creates a context
// (cudaSetDevice, an allocation or a launch does), so a check child started
// after this call still gets the GPU fresh. nullopt (and `why`) when there is
// no such device.
std::optional<GpuIdentity> query_identity(int index, std::string* why = nullptr);

}  // namespace mt::cuda
