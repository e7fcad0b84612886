// Devices: the CPU, a CUDA GPU, or SIM — the CUDA code path run on the CPU
// by mixtape's SIMT simulator (tensors in host memory, CUDA kernels).
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace mt {

enum class DeviceType : uint8_t { CPU, CUDA, SIM };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit from a type is handy

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_sim() const { return type == DeviceType::SIM; }
  // Memory the host can read directly (CPU and SIM tensors).
  constexpr bool host_accessible() const { return type != DeviceType::CUDA; }

  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  std::string str() const;
};

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kCUDA{DeviceType::CUDA};
inline constexpr Device kSIM{DeviceType::SIM};

// Parses "cpu", "cuda", "cuda:1", "sim".
Device parse_device(const std::string& text);

}  // namespace mt

template <>
struct fmt::formatter<mt::Device> : fmt::formatter<std::string> {
  auto format(mt::Device d, format_context& ctx) const { return fmt::formatter<std::string>::format(d.str(), ctx); }
};
