// Declaring the host entry points of a .cu file for op code.
//
// A kernel .cu file defines, next to its kernels, a host function that picks
// the launch shape and calls mt::MT_KERNEL_NS::launch. That function exists
// twice: mt::cuda::name (nvcc build, only when CUDA is enabled) and
// mt::sim::name (always). Op code — ordinary C++ that never includes CUDA
// headers — declares both with one macro in the family header:
//
//   // kernels/reduce.h
//   #include "runtime/kernel_api.h"
//   MT_CUDA_KERNEL_API(void block_sum(const float* in, float* out, int n, mt::kernels::Stream stream));
//
// and calls mt::sim::block_sum(...) for Device SIM, or mt::cuda::block_sum(...)
// for a GPU (guard the latter with MT_WITH_CUDA_KERNELS, which
// mt_add_cuda_kernels defines when the nvcc copy is built). Keep entry-point
// signatures to plain host types: pointers to float / std::uint16_t (for
// f16/bf16 storage), integers, mt::kernels::Stream.
#pragma once

namespace mt::kernels {

// A CUDA stream, without dragging cuda_runtime.h into host code. Null is the
// default stream; the simulator runs every launch synchronously and ignores it.
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
