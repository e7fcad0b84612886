// Device dispatch for kernel families. Each kernels/<family>.h declares the
// family's per-device implementations and a dispatching entry point; op code
// (autograd/) calls only the entry point.
//
// The pattern (copy it for a new family):
//
//   // kernels/cuda/scale_api.h — nvcc-safe: plain types and TensorRef only
//   MT_CUDA_KERNEL_API(void scale(const mt::kernels::TensorRef& x, float factor, mt::kernels::Stream stream))
//
//   // kernels/scale.h — the dispatcher
//   inline void scale(const Tensor& x, double factor) {
//     const Backend backend = backend_for(x.device(), "scale");
//     if (backend == Backend::Cpu) return cpu::scale(x, factor);
//     MT_DEVICE_CALL(backend, scale, tensor_ref(x), float(factor), launch_stream(x.device()));
//     mark_written(x);  // kernels write through raw pointers: bump the version autograd checks
//   }
//
// kernels/cuda/scale.cu includes runtime/launch.h FIRST (it defines
// __host__/__device__ for the simulator build), then its _api.h, and defines
// mt::MT_KERNEL_NS::scale: compiled for the simulator as mt::sim::scale and by
// nvcc as mt::cuda::scale. MT_DEVICE_CALL writes the argument list once and
// calls whichever of the two the backend names; both calls are compiled in
// every build (the CUDA declarations always exist), so a wrong argument is a
// compile error on a CPU-only build too; without nvcc-built kernels the CUDA
// branch is discarded and the call is a "no CUDA device available" error.
// MT_CUDA_CALL remains for the few entry points with no simulator twin
// (cuDNN). Argument checks that need mt::fail live in the dispatcher (nvcc
// never sees runtime/error.h); kernels/cuda/elementwise_loop.h has the shared
// dtype load/store and strided-iterator helpers.
#pragma once

#include "core/stream.h"
#include "core/tensor.h"
#include "runtime/kernel_api.h"
#include "kernels/cuda/tensor_ref.h"

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

static_assert(static_cast<int>(DTypeCode::Bool) == static_cast<int>(DType::Bool) &&
                  static_cast<int>(DTypeCode::BF16) == static_cast<int>(DType::BF16) &&
                  static_cast<int>(DTypeCode::I64) == static_cast<int>(DType::I64),
              "DTypeCode must mirror mt::DType");

// A tensor as the CUDA entry points see it. An undefined tensor gives data == nullptr.
inline TensorRef tensor_ref(const Tensor& t) {
  TensorRef r;
  if (!t.defined()) return r;
  MT_CHECK(t.dim() <= kMaxDims, "CUDA kernels take tensors of at most {} dims, got {}", kMaxDims, t.shape_string());
  r.data = t.data_ptr();
  r.dtype = static_cast<DTypeCode>(t.dtype());
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
