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
// parameter types exactly as in a <<<>>> launch.
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>

#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/kernel_api.h"
#include "kernels/cuda/launch_check.h"

namespace mt::MT_KERNEL_NS {

using kernels::Stream;

namespace launch_detail {
inline kernels::detail::LaunchShape shape_of(const dim3& grid, const dim3& block, std::size_t shared_bytes) {
  return {grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes};
}
}  // namespace launch_detail

#if MT_SIM_BUILD

template <typename... Params, typename... Args>
void launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block,
            std::size_t dynamic_shared_bytes, Stream /*stream: the simulator is synchronous*/, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  // Like a real launch, the arguments are converted and copied once, and
  // every thread receives its own copy of that parameter pack.
  struct Context {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  const Context context{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  ::mt::simulator::KernelLaunch description;
  description.kernel_name = kernel_name;
  description.grid = grid;
  description.block = block;
  description.dynamic_shared_bytes = dynamic_shared_bytes;
  description.context = &context;
  description.run_thread = [](const void* erased) {
    const auto& ctx = *static_cast<const Context*>(erased);
    auto params = ctx.params;
    std::apply(ctx.kernel, params);
  };
  ::mt::simulator::run_kernel(description);
}

#else  // nvcc

template <typename... Params, typename... Args>
void launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block,
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
  kernel<<<grid, block, dynamic_shared_bytes, static_cast<cudaStream_t>(stream.handle)>>>(
      std::forward<Args>(args)...);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) kernels::detail::throw_launch_error(kernel_name, shape, cudaGetErrorString(error));
}

#endif

}  // namespace mt::MT_KERNEL_NS
