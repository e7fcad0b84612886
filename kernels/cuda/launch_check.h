// Launch-configuration checks shared by the GPU and simulator paths, so an
// invalid grid or block fails the same way (an mt::Error naming the kernel)
// whether or not a GPU is present.
#pragma once

#include <cstddef>

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
