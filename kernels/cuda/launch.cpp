// Host-only half of the launch helper: shape checks and error messages.
// Compiled by the host compiler (fmt stays out of nvcc's way).
#include "kernels/cuda/launch_check.h"

#include "core/error.h"

namespace mt::kernels::detail {

namespace {
std::string describe(const LaunchShape& s) {
  return fmt::format("grid ({},{},{}), block ({},{},{}), dynamic shared memory {} bytes", s.grid_x, s.grid_y,
                     s.grid_z, s.block_x, s.block_y, s.block_z, s.dynamic_shared_bytes);
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
