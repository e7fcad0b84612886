// Block-wide reductions for the row-wise kernels (shared by the CUDA kernels of several families):
// warp shuffles inside a warp, one shared slot per warp across warps. Every
// thread of the block must call them (they contain __syncthreads) and gets
// the block's result. blockDim.x must be a multiple of 32, at most 1024.
#pragma once

#include <cmath>

#include "runtime/cuda_compat.h"

namespace mt::MT_KERNEL_NS::rowwise {

__device__ __forceinline__ float acc_exp(float x) { return expf(x); }
__device__ __forceinline__ double acc_exp(double x) { return exp(x); }
__device__ __forceinline__ float acc_log(float x) { return logf(x); }
__device__ __forceinline__ double acc_log(double x) { return log(x); }
__device__ __forceinline__ float acc_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double acc_rsqrt(double x) { return rsqrt(x); }
template <typename T>
__device__ __forceinline__ T negative_infinity() {
  return -static_cast<T>(INFINITY);
}

template <typename T>
struct Plus {
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// Max that keeps a NaN (fmaxf would drop it).
template <typename T>
struct MaxKeepNan {
  __device__ __forceinline__ T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T value, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}
template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
  return warp_reduce(value, Plus<T>());
}

// `scratch` is 32 elements of shared memory; `identity` is op's neutral value.
template <typename T, typename Op>
__device__ T block_reduce(T value, T* scratch, Op op, T identity) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  value = warp_reduce(value, op);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    T total = lane < warps ? scratch[lane] : identity;
    total = warp_reduce(total, op);
    if (lane == 0) scratch[0] = total;
  }
  __syncthreads();
  const T result = scratch[0];
  __syncthreads();  // scratch may be reused by the next call
  return result;
}
template <typename T>
__device__ T block_sum(T value, T* scratch) {
  return block_reduce(value, scratch, Plus<T>(), T(0));
}

// Online softmax statistics: running max and sum of exp(x - max).
template <typename T>
struct MaxSum {
  T max, sum;
};

template <typename T>
__device__ __forceinline__ MaxSum<T> combine(MaxSum<T> a, MaxSum<T> b) {
  const T m = a.max > b.max ? a.max : b.max;
  // Both empty (or all -inf): the sums are 0, unless a lane saw a NaN, whose
  // NaN sum must survive (returning 0 here once hid a NaN in a short row).
  if (m == negative_infinity<T>()) return {m, a.sum + b.sum};
  return {m, a.sum * acc_exp(a.max - m) + b.sum * acc_exp(b.max - m)};
}

// Adds one element to a running MaxSum (the one-pass "online softmax" update).
template <typename T>
__device__ __forceinline__ void accumulate(MaxSum<T>& s, T x) {
  if (x > s.max) {
    s.sum = s.sum * acc_exp(s.max - x) + T(1);
    s.max = x;
  } else if (x != negative_infinity<T>()) {
    s.sum += acc_exp(x - s.max);  // NaN x lands here and poisons the sum, as it should
  }
}

template <typename T>
__device__ MaxSum<T> block_max_sum(MaxSum<T> value, T* scratch_max, T* scratch_sum) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum<T> other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                          __shfl_xor_sync(0xffffffffu, value.sum, offset)};
    value = combine(value, other);
  }
  if (lane == 0) {
    scratch_max[warp] = value.max;
    scratch_sum[warp] = value.sum;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSum<T> total =
        lane < warps ? MaxSum<T>{scratch_max[lane], scratch_sum[lane]} : MaxSum<T>{negative_infinity<T>(), T(0)};
    for (int offset = 16; offset > 0; offset /= 2) {
      const MaxSum<T> other{__shfl_xor_sync(0xffffffffu, total.max, offset),
                            __shfl_xor_sync(0xffffffffu, total.sum, offset)};
      total = combine(total, other);
    }
    if (lane == 0) {
      scratch_max[0] = total.max;
      scratch_sum[0] = total.sum;
    }
  }
  __syncthreads();
  const MaxSum<T> result{scratch_max[0], scratch_sum[0]};
  __syncthreads();
  return result;
}

// Threads per row: enough warps to cover short rows, 256 for long ones.
inline int threads_for_row(int64_t cols) {
  if (cols >= 256) return 256;
  const int warps = static_cast<int>((cols + 31) / 32);
  return 32 * (warps < 1 ? 1 : warps);
}

// Rows up to this many accumulator bytes are cached in shared memory, so
// global memory is read once.
inline constexpr std::size_t kRowCacheBytes = 48 * 1024;

}  // namespace mt::MT_KERNEL_NS::rowwise
