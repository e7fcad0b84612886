// What CUDA devices this process can see (built only when CUDA is enabled).
#pragma once

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

}  // namespace mt::cuda
