#include "tools/train/machine.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#if defined(MT_WITH_CUDA)
#include "core/device_info.h"
#endif

namespace mt::tools {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string source_commit() {
#if defined(MT_SOURCE_DIR)
  const std::string command = std::string("git -C '") + MT_SOURCE_DIR + "' rev-parse HEAD 2>/dev/null";
  if (std::FILE* p = ::popen(command.c_str(), "r")) {
    char buffer[64] = {};
    const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, p);
    ::pclose(p);
    std::string commit(buffer, n);
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
    if (commit.size() == 40) return commit;
  }
#endif
  return "unknown";
}

nlohmann::json machine_json(Device device) {
  nlohmann::json machine = {
      {"device", device.str()}, {"cpu", cpu_model()}, {"cores", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))}};
#if defined(MT_WITH_CUDA)
  if (device.type == DeviceType::CUDA) {
    const auto gpus = cuda::query_devices();
    machine["gpus"] = gpus.names;
    machine["cuda_runtime"] = gpus.runtime_version;
  }
#endif
  return machine;
}

}  // namespace mt::tools
