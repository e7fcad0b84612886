// Launch-configuration checks shared by the GPU and simulator paths, so an
// invalid grid or block fails the same way (an mt::Error naming the kernel)
// whether or not a GPU is present.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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

// What one launch reads and writes in device memory and the floating-point
// operations it does, as the host code that launches it counts them (the
// minimum traffic: each operand once). The table turns them into achieved
// GB/s and TFLOP/s.
struct LaunchWork {
  double bytes = 0;
  double flops = 0;
};
// Declares the work of this thread's next launch() (or ProfiledRegion); a
// launch nobody declared shows no bytes or FLOPs.
void declare_launch_work(double bytes, double flops = 0);
LaunchWork take_launch_work();

// Adds one call of `name` that took `milliseconds`; `blocks` is its grid size
// (0 for a library call).
void profile_add(const char* name, unsigned long long blocks, double milliseconds, LaunchWork work = {});
// The ceilings the table measures each row against (0: unknown): the
// device-to-device copy's GB/s and the dense GEMM's TFLOP/s, as measured on
// the device (bench/bandwidth_bench, bench/gemm_bench), or MT_PROFILE_CEILINGS
// = "<copy GB/s>,<GEMM TFLOP/s>".
void set_profile_ceilings(double copy_gbs, double gemm_tflops);
// One row of the table, summed over the calls of one kernel (or library call).
struct ProfileEntry {
  std::string name;
  long long calls = 0;
  double milliseconds = 0, blocks = 0, bytes = 0, flops = 0;
};
// The rows, slowest total first.
std::vector<ProfileEntry> profile_entries();
// The table of profile_entries(): calls, total and mean time, share, mean
// grid size, achieved GB/s and TFLOP/s with their share of the ceilings.
std::string profile_report(std::size_t max_rows = 40);
void profile_reset();

}  // namespace mt::kernels
