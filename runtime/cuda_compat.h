// One kernel source, two targets.
//
// Every mixtape .cu file includes this header first. It is compiled twice:
//
//   * by nvcc for the GPU (__CUDACC__ defined): CUDA's own headers, and
//     MT_KERNEL_NS is `cuda`, so the file's kernels land in mt::cuda;
//   * by the host C++ compiler against the SIMT simulator (MT_SIM defined by
//     mt_add_cuda_kernels): CUDA's keywords and built-ins map onto
//     runtime/sim, and MT_KERNEL_NS is `sim`, so the same kernels land in
//     mt::sim.
//
// Both copies end up in one library, so everything a .cu file defines goes
// inside `namespace mt::MT_KERNEL_NS { ... }`; the two copies then never share
// a symbol. Write kernels as plain CUDA, with two exceptions:
//
//   * dynamic shared memory: MT_DYNAMIC_SHARED(float, tile); instead of
//     `extern __shared__ float tile[];`
//   * Tensor Core / cp.async instructions: only through kernels/common/ptx.h
//     and ptx_hopper.h.
//
// Start kernels only through runtime/launch.h.
#pragma once

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define MT_KERNEL_NS cuda
#define MT_SIM_BUILD 0

// All dynamic shared memory is one extern array; each kernel views it as T*.
#define MT_DYNAMIC_SHARED(T, name)                                    \
  extern __shared__ __align__(16) unsigned char mt_dynamic_shared_[]; \
  T* name = reinterpret_cast<T*>(mt_dynamic_shared_)

#elif defined(MT_SIM)

#include <cstdio>

#include "runtime/sim/intrinsics.h"

#define MT_KERNEL_NS sim
#define MT_SIM_BUILD 1

// CUDA's execution-space keywords mean nothing on the host. Kernels stay
// ordinary (non-inline) functions so a debugger can `break` on their name.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__

// A worker thread runs one block at a time, so a `static thread_local`
// variable is exactly one copy per running block: CUDA's __shared__.
#define __shared__ static thread_local
#define __constant__

#define MT_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::mt::simulator::dynamic_shared_memory())

// CUDA's names (threadIdx, __syncthreads, __shfl_sync, atomicAdd, __half, ...).
using namespace ::mt::simulator::cuda_names;

#else
#error "runtime/cuda_compat.h: compile with nvcc, or with the host compiler and -DMT_SIM (see mt_add_cuda_kernels)"
#endif

// Element math shared with the CPU kernels (kernels/common) is marked MT_HD.
#define MT_HD __host__ __device__
