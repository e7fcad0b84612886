// The only way mixtape code starts a kernel.
//
//   namespace mt::MT_KERNEL_NS {
//   __global__ void scale_kernel(float* x, float factor, int n) { ... }
//
//   void scale(float* x, float factor, int n, kernels::Stream stream) {
//     launch("scale_kernel", scale_kernel, dim3((n + 255) / 256), dim3(256),
//            /*dynamic_shared_bytes=*/0, stream, x, factor, n);
//   }
//   }
//
// Under nvcc this is `kernel<<<grid, block, shared, stream>>>(args...)` plus
// error checking; in the simulator build it runs the grid on the CPU and
// returns when it is done. Both check the launch shape against CUDA's limits
// and throw mt::Error naming the kernel. Arguments convert to the kernel's
// parameter types exactly as in a <<<>>> launch. With MT_PROFILE=1 each launch
// is timed into a per-kernel table (launch_check.h); ProfiledRegion times a
// library call (cuBLASLt, cuDNN) the same way.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>

#include "runtime/cuda_compat.h"
#include "runtime/kernel_api.h"
#include "runtime/launch_check.h"

namespace mt::MT_KERNEL_NS {

using kernels::Stream;

namespace launch_detail {
inline kernels::detail::LaunchShape shape_of(const dim3& grid, const dim3& block, std::size_t shared_bytes) {
  return {grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes};
}
inline unsigned long long blocks_of(const dim3& grid) { return 1ull * grid.x * grid.y * grid.z; }
}  // namespace launch_detail

#if MT_SIM_BUILD

// Times the enclosed work for the profile table when profiling is on: the
// simulator runs each eager launch before returning, so the host clock
// measures it.
class ProfiledRegion {
 public:
  ProfiledRegion(const char* name, Stream /*stream*/, unsigned long long blocks = 0,
                 kernels::LaunchWork work = kernels::take_launch_work())
      : name_(name), blocks_(blocks), work_(work), active_(kernels::profiling()) {
    if (active_) start_ = std::chrono::steady_clock::now();
  }
  ~ProfiledRegion() {
    if (!active_) return;
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start_;
    kernels::profile_add(name_, blocks_, elapsed.count(), work_);
  }
  ProfiledRegion(const ProfiledRegion&) = delete;
  ProfiledRegion& operator=(const ProfiledRegion&) = delete;

 private:
  const char* name_;
  unsigned long long blocks_;
  kernels::LaunchWork work_;
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

// The simulator runs each launch before returning, except on a stream being
// captured or deferred (runtime/sim/runtime.h): there the launch, with its
// converted arguments, becomes a recorded node that runs when the graph is
// replayed or the deferred stream is waited for.
// launch() with thread block clusters of `cluster` blocks (sm_90): the
// blocks of a cluster run together and share their dynamic shared memory.
template <typename... Params, typename... Args>
void launch_clusters(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                     std::size_t dynamic_shared_bytes, Stream stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  // Like a real launch, the arguments are converted and copied once, and
  // every thread receives its own copy of that parameter pack.
  struct Context {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  auto context = std::make_shared<const Context>(
      Context{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)});
  ::mt::simulator::KernelLaunch description;
  description.kernel_name = kernel_name;
  description.grid = grid;
  description.block = block;
  description.dynamic_shared_bytes = dynamic_shared_bytes;
  description.cluster = cluster;
  description.context = context.get();
  description.run_thread = [](const void* erased) {
    const auto& ctx = *static_cast<const Context*>(erased);
    auto params = ctx.params;
    std::apply(ctx.kernel, params);
  };
  // The work declared for this launch is taken now, not when a recorded launch runs.
  auto run = [description, context, work = kernels::take_launch_work()] {
    const ProfiledRegion profiled(description.kernel_name, Stream{}, launch_detail::blocks_of(description.grid), work);
    ::mt::simulator::run_kernel(description);
  };
  if (::mt::simulator::records_work(reinterpret_cast<std::uint64_t>(stream.handle), kernel_name)) {
    kernels::detail::check_launch_shape(kernel_name, launch_detail::shape_of(grid, block, dynamic_shared_bytes));
    ::mt::simulator::record_node(reinterpret_cast<std::uint64_t>(stream.handle), kernel_name, std::move(run));
    return;
  }
  run();
}

template <typename... Params, typename... Args>
void launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
            Stream stream, Args&&... args) {
  launch_clusters(kernel_name, kernel, grid, block, dim3(1, 1, 1), dynamic_shared_bytes, stream,
                  std::forward<Args>(args)...);
}

#else  // nvcc

// Times the enclosed GPU work on `stream` for the profile table when
// profiling is on: CUDA events before and after, then a wait for the second,
// so each row is the work's own GPU time (and a profiled run is slower).
class ProfiledRegion {
 public:
  ProfiledRegion(const char* name, Stream stream, unsigned long long blocks = 0,
                 kernels::LaunchWork work = kernels::take_launch_work())
      : name_(name), blocks_(blocks), work_(work), stream_(static_cast<cudaStream_t>(stream.handle)) {
    if (!kernels::profiling()) return;
    active_ = cudaEventCreate(&begin_) == cudaSuccess && cudaEventCreate(&end_) == cudaSuccess &&
              cudaEventRecord(begin_, stream_) == cudaSuccess;
  }
  ~ProfiledRegion() {
    float milliseconds = 0;
    if (active_ && cudaEventRecord(end_, stream_) == cudaSuccess && cudaEventSynchronize(end_) == cudaSuccess &&
        cudaEventElapsedTime(&milliseconds, begin_, end_) == cudaSuccess) {
      kernels::profile_add(name_, blocks_, milliseconds, work_);
    }
    if (begin_ != nullptr) cudaEventDestroy(begin_);
    if (end_ != nullptr) cudaEventDestroy(end_);
  }
  ProfiledRegion(const ProfiledRegion&) = delete;
  ProfiledRegion& operator=(const ProfiledRegion&) = delete;

 private:
  const char* name_;
  unsigned long long blocks_;
  kernels::LaunchWork work_;
  cudaStream_t stream_;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
  bool active_ = false;
};

template <typename... Params, typename... Args>
void launch_clusters(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                     std::size_t dynamic_shared_bytes, Stream stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  const auto shape = launch_detail::shape_of(grid, block, dynamic_shared_bytes);
  kernels::detail::check_launch_shape(kernel_name, shape);
  // Above 48 KiB a kernel must opt in to the larger dynamic shared memory.
  if (dynamic_shared_bytes > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(dynamic_shared_bytes));
    if (error != cudaSuccess) kernels::detail::throw_launch_error(kernel_name, shape, cudaGetErrorString(error));
  }
  const ProfiledRegion profiled(kernel_name, stream, launch_detail::blocks_of(grid));
  cudaError_t error = cudaSuccess;
  if (cluster.x * cluster.y * cluster.z == 1) {
    // clang-format reads a .h as C++ and would split the launch brackets.
    // clang-format off
    kernel<<<grid, block, dynamic_shared_bytes, static_cast<cudaStream_t>(stream.handle)>>>(std::forward<Args>(args)...);
    // clang-format on
    error = cudaGetLastError();
  } else {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster.x;
    attribute.val.clusterDim.y = cluster.y;
    attribute.val.clusterDim.z = cluster.z;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = dynamic_shared_bytes;
    config.stream = static_cast<cudaStream_t>(stream.handle);
    config.attrs = &attribute;
    config.numAttrs = 1;
    if constexpr (sizeof...(Params) > 0) {  // (its argument array cannot be empty)
      error = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    } else {
      error = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), nullptr);
    }
  }
  if (error != cudaSuccess) kernels::detail::throw_launch_error(kernel_name, shape, cudaGetErrorString(error));
}

template <typename... Params, typename... Args>
void launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
            Stream stream, Args&&... args) {
  launch_clusters(kernel_name, kernel, grid, block, dim3(1, 1, 1), dynamic_shared_bytes, stream,
                  std::forward<Args>(args)...);
}

#endif

}  // namespace mt::MT_KERNEL_NS
