// Host-only half of the launch helper: shape checks, error messages and the
// profile table. Compiled by the host compiler (fmt stays out of nvcc's way).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/launch_check.h"

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
  double bytes = 0;
  double flops = 0;
};

struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

struct Profile {
  std::mutex mutex;
  std::map<std::string, ProfileRow> rows;
  Ceilings ceilings = ceilings_from_env();

  static Ceilings ceilings_from_env() {
    Ceilings c;
    if (const char* value = std::getenv("MT_PROFILE_CEILINGS")) {
      if (std::sscanf(value, "%lf,%lf", &c.copy_gbs, &c.gemm_tflops) != 2) c = Ceilings{};
    }
    return c;
  }
};

thread_local LaunchWork pending_work;

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

void declare_launch_work(double bytes, double flops) { pending_work = LaunchWork{bytes, flops}; }

LaunchWork take_launch_work() { return std::exchange(pending_work, LaunchWork{}); }

void profile_add(const char* name, unsigned long long blocks, double milliseconds, LaunchWork work) {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  ProfileRow& row = p.rows[name];
  ++row.calls;
  row.milliseconds += milliseconds;
  row.blocks += static_cast<double>(blocks);
  row.bytes += work.bytes;
  row.flops += work.flops;
}

void set_profile_ceilings(double copy_gbs, double gemm_tflops) {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  p.ceilings = Ceilings{copy_gbs, gemm_tflops};
}

namespace {

// "  123.4   45.6%": a rate and its share of the ceiling, blanks where unknown.
std::string rate_column(double rate, double ceiling) {
  if (rate <= 0) return fmt::format("{:>9} {:>6}", "-", "");
  if (ceiling <= 0) return fmt::format("{:>9.1f} {:>6}", rate, "");
  return fmt::format("{:>9.1f} {:>5.1f}%", rate, 100.0 * rate / ceiling);
}

}  // namespace

std::vector<ProfileEntry> profile_entries() {
  Profile& p = profile();
  const std::lock_guard lock(p.mutex);
  std::vector<ProfileEntry> entries;
  for (const auto& [name, row] : p.rows) {
    entries.push_back({name, row.calls, row.milliseconds, row.blocks, row.bytes, row.flops});
  }
  std::sort(entries.begin(), entries.end(),
            [](const ProfileEntry& a, const ProfileEntry& b) { return a.milliseconds > b.milliseconds; });
  return entries;
}

std::string profile_report(std::size_t max_rows) {
  const std::vector<ProfileEntry> rows = profile_entries();
  Ceilings ceilings;
  {
    Profile& p = profile();
    const std::lock_guard lock(p.mutex);
    ceilings = p.ceilings;
  }
  double total = 0;
  for (const ProfileEntry& row : rows) total += row.milliseconds;
  std::string out = fmt::format("{:<40} {:>9} {:>11} {:>10} {:>7} {:>11} {:>9} {:>6} {:>9} {:>6}\n", "kernel", "calls",
                                "total ms", "mean us", "share", "mean grid", "GB/s", "%copy", "TFLOP/s", "%gemm");
  for (std::size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const ProfileEntry& row = rows[i];
    const double seconds = row.milliseconds / 1000.0;
    const double gbs = seconds > 0 ? row.bytes / seconds / 1e9 : 0, tflops = seconds > 0 ? row.flops / seconds / 1e12 : 0;
    out += fmt::format("{:<40} {:>9} {:>11.3f} {:>10.1f} {:>6.1f}% {:>11.0f} {} {}\n", row.name, row.calls,
                       row.milliseconds, 1000.0 * row.milliseconds / static_cast<double>(row.calls),
                       total > 0 ? 100.0 * row.milliseconds / total : 0.0, row.blocks / static_cast<double>(row.calls),
                       rate_column(gbs, ceilings.copy_gbs), rate_column(tflops, ceilings.gemm_tflops));
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
