// Host-only half of the launch helper: shape checks, error messages and the
// profile table. Compiled by the host compiler (fmt stays out of nvcc's way).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/launch_check.h"

namespace mt::kernels::detail {

namespace {
std::string describe(const LaunchShape& s) {
  return fmt::format("grid ({},{},{}), block ({},{},{}), dynamic shared memory {} bytes", s.grid_x, s.grid_y, s.grid_z,
                     s.block_x, s.block_y, s.block_z, s.dynamic_shared_bytes);
}
}  // namespace

void check_launch_shape(const char* kernel_name, const LaunchShape& s) {
  const unsigned long long threads = 1ull * s.block_x * s.block_y * s.block_z;
  MT_CHECK(threads >= 1 && threads <= 1024, "launch of kernel '{}': a block must have 1..1024 threads, got {} ({})",
           kernel_name, threads, describe(s));
  MT_CHECK(s.block_z <= 64, "launch of kernel '{}': block.z must be <= 64 ({})", kernel_name, describe(s));
  MT_CHECK(s.grid_x >= 1 && s.grid_y >= 1 && s.grid_z >= 1, "launch of kernel '{}': empty grid ({})", kernel_name,
           describe(s));
  MT_CHECK(s.grid_x <= 2147483647u && s.grid_y <= 65535 && s.grid_z <= 65535,
           "launch of kernel '{}': grid too large (x <= 2^31-1, y,z <= 65535) ({})", kernel_name, describe(s));
  MT_CHECK(s.dynamic_shared_bytes <= kMaxDynamicSharedBytes,
           "launch of kernel '{}': {} bytes of dynamic shared memory exceeds the {} bytes a block may use ({})",
           kernel_name, s.dynamic_shared_bytes, kMaxDynamicSharedBytes, describe(s));
}

void throw_launch_error(const char* kernel_name, const LaunchShape& shape, const char* cuda_error) {
  fail("launch of kernel '{}' failed: {} ({})", kernel_name, cuda_error, describe(shape));
}

}  // namespace mt::kernels::detail

namespace mt::kernels {

// ---- profiling

namespace {

struct ProfileRow {
  long long calls = 0;
  double milliseconds = 0;
  double blocks = 0;
};

struct Profile {
  std::mutex mutex;
  std::map<std::string, ProfileRow> rows;
};

Profile& profile() {
  static Profile* p = new Profile;  // never destroyed: launches may outlive static destructors
  return *p;
}

std::atomic<bool>& profiling_flag() {
  static std::atomic<bool> flag = [] {
    const char* value = std::getenv("MT_PROFILE");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return flag;
}

}  // namespace

bool profiling() { return profiling_flag().load(std::memory_order_relaxed); }
void set_profiling(bool enabled) { profiling_flag().store(enabled); }

void profile_add(const char* name, unsigned long long blocks, double milliseconds) {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  ProfileRow& row = p.rows[name];
  ++row.calls;
  row.milliseconds += milliseconds;
  row.blocks += static_cast<double>(blocks);
}

std::string profile_report(std::size_t max_rows) {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  std::vector<std::pair<std::string, ProfileRow>> rows(p.rows.begin(), p.rows.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.milliseconds > b.second.milliseconds; });
  double total = 0;
  for (const auto& [name, row] : rows) total += row.milliseconds;
  std::string out = fmt::format("{:<40} {:>9} {:>11} {:>10} {:>7} {:>11}\n", "kernel", "calls", "total ms", "mean us",
                                "share", "mean grid");
  for (std::size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const auto& [name, row] = rows[i];
    out += fmt::format("{:<40} {:>9} {:>11.3f} {:>10.1f} {:>6.1f}% {:>11.0f}\n", name, row.calls, row.milliseconds,
                       1000.0 * row.milliseconds / static_cast<double>(row.calls),
                       total > 0 ? 100.0 * row.milliseconds / total : 0.0, row.blocks / static_cast<double>(row.calls));
  }
  if (rows.size() > max_rows) out += fmt::format("({} more)\n", rows.size() - max_rows);
  out += fmt::format("{:<40} {:>9} {:>11.3f}\n", "all", "", total);
  return out;
}

void profile_reset() {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  p.rows.clear();
}

}  // namespace mt::kernels
