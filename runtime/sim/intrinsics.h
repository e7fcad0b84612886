// CUDA's device-side built-ins, implemented for the SIMT simulator.
//
// Everything kernel code calls by its CUDA name — __syncthreads, the warp
// shuffles and votes, atomics, __ldg, vector types, the fast-math intrinsics —
// is declared here in mt::simulator::cuda_names, which cuda_compat.h pulls
// into the global namespace of a simulator-built .cu file. Functions that wait
// for other threads take a defaulted SourceSite (std::source_location), so a
// deadlock report can say which line each thread is stuck on.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "runtime/sim/half.h"
#include "runtime/sim/runtime.h"
#include "runtime/sim/source_site.h"
#include "runtime/sim/warp_ops.h"

namespace mt::simulator::cuda_names {

using ::mt::simulator::blockDim;
using ::mt::simulator::blockIdx;
using ::mt::simulator::dim3;
using ::mt::simulator::gridDim;
using ::mt::simulator::threadIdx;
using ::mt::simulator::uint3;

inline constexpr int warpSize = 32;

// ---- barriers and warp synchronisation ------------------------------------------

inline void __syncthreads(SourceSite site = SourceSite::current()) { syncthreads(site); }

inline void __syncwarp(unsigned mask = 0xffffffffu, SourceSite site = SourceSite::current()) {
  warp_sync("__syncwarp", warp_ops::syncwarp, mask, nullptr, nullptr, 0, site);
}

inline unsigned __activemask(SourceSite site = SourceSite::current()) { return active_mask(site); }

// ---- shuffles ---------------------------------------------------------------------

namespace detail {
template <typename T>
T shuffle(const char* name, WarpCompleteFn op, unsigned mask, T value, int lane_arg, int width, SourceSite site) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
  warp_ops::ShuffleInput input{0, lane_arg};
  std::memcpy(&input.bits, &value, sizeof(T));
  std::uint64_t output = 0;
  warp_sync(name, op, mask, &input, &output, static_cast<std::uint64_t>(width), site);
  T result;
  std::memcpy(&result, &output, sizeof(T));
  return result;
}
}  // namespace detail

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32, SourceSite site = SourceSite::current()) {
  return detail::shuffle("__shfl_sync", warp_ops::shuffle_index, mask, value, src_lane, width, site);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32, SourceSite site = SourceSite::current()) {
  return detail::shuffle("__shfl_up_sync", warp_ops::shuffle_up, mask, value, static_cast<int>(delta), width, site);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32, SourceSite site = SourceSite::current()) {
  return detail::shuffle("__shfl_down_sync", warp_ops::shuffle_down, mask, value, static_cast<int>(delta), width, site);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32, SourceSite site = SourceSite::current()) {
  return detail::shuffle("__shfl_xor_sync", warp_ops::shuffle_xor, mask, value, lane_mask, width, site);
}

// ---- votes ------------------------------------------------------------------------

inline unsigned __ballot_sync(unsigned mask, int predicate, SourceSite site = SourceSite::current()) {
  unsigned result = 0;
  const int input = predicate != 0;
  warp_sync("__ballot_sync", warp_ops::ballot, mask, &input, &result, 0, site);
  return result;
}
inline int __any_sync(unsigned mask, int predicate, SourceSite site = SourceSite::current()) {
  unsigned result = 0;
  const int input = predicate != 0;
  warp_sync("__any_sync", warp_ops::vote_any, mask, &input, &result, 0, site);
  return static_cast<int>(result);
}
inline int __all_sync(unsigned mask, int predicate, SourceSite site = SourceSite::current()) {
  unsigned result = 0;
  const int input = predicate != 0;
  warp_sync("__all_sync", warp_ops::vote_all, mask, &input, &result, 0, site);
  return static_cast<int>(result);
}

// ---- atomics (defined in atomics.cpp: real atomics, since blocks may run on
// several worker threads) ---------------------------------------------------------

int atomicAdd(int* address, int value);
unsigned atomicAdd(unsigned* address, unsigned value);
unsigned long long atomicAdd(unsigned long long* address, unsigned long long value);
float atomicAdd(float* address, float value);
double atomicAdd(double* address, double value);
int atomicSub(int* address, int value);
unsigned atomicSub(unsigned* address, unsigned value);
int atomicExch(int* address, int value);
unsigned atomicExch(unsigned* address, unsigned value);
unsigned long long atomicExch(unsigned long long* address, unsigned long long value);
float atomicExch(float* address, float value);
int atomicMin(int* address, int value);
unsigned atomicMin(unsigned* address, unsigned value);
long long atomicMin(long long* address, long long value);
unsigned long long atomicMin(unsigned long long* address, unsigned long long value);
int atomicMax(int* address, int value);
unsigned atomicMax(unsigned* address, unsigned value);
long long atomicMax(long long* address, long long value);
unsigned long long atomicMax(unsigned long long* address, unsigned long long value);
int atomicCAS(int* address, int compare, int value);
unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value);
unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long value);
unsigned short atomicCAS(unsigned short* address, unsigned short compare, unsigned short value);
int atomicAnd(int* address, int value);
unsigned atomicAnd(unsigned* address, unsigned value);
int atomicOr(int* address, int value);
unsigned atomicOr(unsigned* address, unsigned value);
int atomicXor(int* address, int value);
unsigned atomicXor(unsigned* address, unsigned value);
void __threadfence();
void __threadfence_block();

// ---- loads ------------------------------------------------------------------------

template <typename T>
T __ldg(const T* address) {
  return *address;
}

// ---- vector types -------------------------------------------------------------------

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }

// ---- integer and float intrinsics ---------------------------------------------------

inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return std::countl_zero(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline int __ffsll(long long x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1; }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }

// Fast-math intrinsics: the GPU's versions are approximate; here they are the
// accurate library functions (tests compare with a tolerance anyway).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// CUDA's overloaded min/max for device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

}  // namespace mt::simulator::cuda_names
