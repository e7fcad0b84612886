// Launch-configuration checks shared by the GPU and simulator paths, so an
// invalid grid or block fails the same way (an mt::Error naming the kernel)
// whether or not a GPU is present.
#pragma once

#include <cstddef>
#include <string>

namespace mt::kernels::detail {

struct LaunchShape {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  std::size_t dynamic_shared_bytes;
};

// Largest dynamic shared memory one block may request (sm_90: 227 KiB).
inline constexpr std::size_t kMaxDynamicSharedBytes = 227 * 1024;

// Throws mt::Error when the shape breaks a CUDA limit (threads per block,
// block and grid dimensions, shared memory).
void check_launch_shape(const char* kernel_name, const LaunchShape& shape);

// Throws mt::Error for a failed GPU launch; `cuda_error` is cudaGetErrorString's text.
[[noreturn]] void throw_launch_error(const char* kernel_name, const LaunchShape& shape, const char* cuda_error);

}  // namespace mt::kernels::detail

namespace mt::kernels {

// ---- kernel profiling (MT_PROFILE=1, or set_profiling) ---------------------
// Every launch() — and every cuBLASLt / cuDNN call, as a ProfiledRegion — is
// timed and added to a per-name table: on a GPU with CUDA events around the
// launch, waiting for it to finish (so a profiled run is slower, but each
// row is that kernel's own GPU time); on the simulator with the host clock.
bool profiling();
void set_profiling(bool enabled);
// Adds one call of `name` that took `milliseconds`; `blocks` is its grid size
// (0 for a library call).
void profile_add(const char* name, unsigned long long blocks, double milliseconds);
// The table, slowest total first: calls, total and mean time, share, mean grid size.
std::string profile_report(std::size_t max_rows = 40);
void profile_reset();

}  // namespace mt::kernels
