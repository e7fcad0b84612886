// Declaring the host entry points of a .cu file for op code.
//
// A kernel .cu file defines, next to its kernels, a host function that picks
// the launch shape and calls mt::MT_KERNEL_NS::launch. That function exists
// twice: mt::cuda::name (nvcc build, only when CUDA is enabled) and
// mt::sim::name (always). MT_CUDA_KERNEL_API(signature) in a family's api.h
// declares both; the recipe for a whole family is kernels/README.md.
#pragma once

namespace mt::kernels {

// A CUDA stream, without dragging cuda_runtime.h into host code. Null is the
// default stream. The simulator runs a launch at once, unless the stream's
// work is being captured or deferred (runtime/sim/runtime.h).
struct Stream {
  void* handle = nullptr;
};

}  // namespace mt::kernels

#define MT_CUDA_KERNEL_API(...)      \
  namespace mt::cuda {               \
  __VA_ARGS__;                       \
  }                                  \
  namespace mt::sim {                \
  __VA_ARGS__;                       \
  }
