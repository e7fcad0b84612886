// Device dispatch for kernel families: each kernels/<family>/<family>.h
// picks the back end for the output's device (backend_for) and calls the CPU
// function or the CUDA/sim entry point (MT_DEVICE_CALL); op code (autograd/)
// calls only the dispatcher. The recipe for a family is kernels/README.md.
// MT_CUDA_CALL remains for the few entry points with no simulator twin (cuDNN).
#pragma once

#include "core/stream.h"
#include "core/tensor.h"
#include "runtime/kernel_api.h"
#include "kernels/common/tensor_ref.h"

namespace mt::kernels {

enum class Backend { Cpu, Cuda, Sim };

// Which backend runs a kernel whose output lives on `device`: CPU tensors run
// the CPU kernels; SIM tensors run the CUDA kernels in the SIMT simulator;
// CUDA tensors run them on the GPU (when this build has nvcc-built kernels).
inline Backend backend_for(Device device, const char* kernel) {
  if (device.is_cpu()) return Backend::Cpu;
  if (device.is_sim()) return Backend::Sim;
#if defined(MT_WITH_CUDA_KERNELS)
  return Backend::Cuda;
#else
  fail(
      "{}: no CUDA device available: this build of mixtape has no CUDA kernels (configured without nvcc); "
      "use the cpu or sim device",
      kernel);
#endif
}

#if defined(MT_WITH_CUDA_KERNELS)
inline constexpr bool kCudaKernelsBuilt = true;
#define MT_CUDA_CALL(...) return ::mt::cuda::__VA_ARGS__
#else
inline constexpr bool kCudaKernelsBuilt = false;
#define MT_CUDA_CALL(...) ::mt::fail("no CUDA device available: this build has no CUDA kernels")
#endif

// Calls entry point `fn` of the sim or CUDA build (per `backend`, not Cpu) with one argument list.
#define MT_DEVICE_CALL(backend, fn, ...)                                               \
  do {                                                                                 \
    if ((backend) == ::mt::kernels::Backend::Sim) {                                    \
      ::mt::sim::fn(__VA_ARGS__);                                                      \
    } else if constexpr (::mt::kernels::kCudaKernelsBuilt) {                           \
      ::mt::cuda::fn(__VA_ARGS__);                                                     \
    } else {                                                                           \
      ::mt::fail("{}: no CUDA device available: this build has no CUDA kernels", #fn); \
    }                                                                                  \
  } while (false)

// A tensor as the CUDA entry points see it. An undefined tensor gives data == nullptr.
inline TensorRef tensor_ref(const Tensor& t) {
  TensorRef r;
  if (!t.defined()) return r;
  MT_CHECK(t.dim() <= kMaxDims, "CUDA kernels take tensors of at most {} dims, got {}", kMaxDims, t.shape_string());
  r.data = t.data_ptr();
  r.dtype = t.dtype();
  r.ndim = static_cast<int32_t>(t.dim());
  r.numel = t.numel();
  for (int d = 0; d < r.ndim; ++d) {
    r.sizes[d] = t.sizes()[static_cast<size_t>(d)];
    r.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return r;
}

// The calling thread's current stream on the device (core/stream.h).
inline Stream launch_stream(Device device) { return {::mt::current_stream(device).handle()}; }

// Kernels write through raw pointers; autograd's saved-tensor checks need the version bumped.
inline void mark_written(const Tensor& t) {
  if (t.defined()) t.storage()->bump_version();
}

}  // namespace mt::kernels
