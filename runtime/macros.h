// Portability macros shared by host code and CUDA kernels.
#pragma once

// In the simulator build (MT_SIM) device code is ordinary host code.
#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

#if defined(__CUDACC__)
#define MT_INLINE __forceinline__
#else
#define MT_INLINE inline __attribute__((always_inline))
#endif
