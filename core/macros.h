// Portability macros shared by host code and CUDA kernels.
#pragma once

#if defined(__CUDACC__) || defined(MT_SIM)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

#if defined(__CUDACC__)
#define MT_INLINE __forceinline__
#else
#define MT_INLINE inline __attribute__((always_inline))
#endif
