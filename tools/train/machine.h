// What a report says about where its figures came from: the machine and the
// source commit (`mixtape bench --json`, the HTML report).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"

namespace mt::tools {

// The CPU's model name from /proc/cpuinfo ("unknown" where it has none).
std::string cpu_model();

// The git commit the binary was built from, read at run time from the
// source tree it was configured in; "unknown" outside a git checkout.
std::string source_commit();

// {"device", "cpu", "cores"} and, for a CUDA device, {"gpus", "cuda_runtime"}.
nlohmann::json machine_json(Device device);

}  // namespace mt::tools
