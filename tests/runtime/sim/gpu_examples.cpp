// The example kernels on a real GPU (the nvcc-built mt::cuda copies), checked
// against the simulator-built copies on the same inputs. Exits 77 (CTest:
// skipped) when no GPU is present.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/fp8.h"
#include "runtime/sim/half.h"
#include "tests/runtime/sim/example_kernels.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++failures;
}

void cuda_ok(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::printf("CUDA error in %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* device = nullptr;
  cuda_ok(cudaMalloc(&device, host.size() * sizeof(T)), "cudaMalloc");
  cuda_ok(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  return device;
}

template <typename T>
std::vector<T> to_host(const T* device, std::size_t count) {
  std::vector<T> host(count);
  cuda_ok(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "copy to host");
  return host;
}

void block_sum_matches() {
  const int n = 70000;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
  float sim_out = 0.0f;
  mt::sim::block_sum(in.data(), &sim_out, n, {});
  float* d_in = to_device(in);
  float* d_out = to_device(std::vector<float>{0.0f});
  mt::cuda::block_sum(d_in, d_out, n, {});
  cuda_ok(cudaDeviceSynchronize(), "block_sum");
  check(to_host(d_out, 1)[0] == sim_out, "block_sum GPU == simulator");
  cudaFree(d_in);
  cudaFree(d_out);
}

void transpose_matches() {
  const int rows = 45, cols = 70;
  std::vector<float> in(rows * cols), sim_out(rows * cols);
  for (int i = 0; i < rows * cols; ++i) in[i] = static_cast<float>(i);
  mt::sim::transpose(in.data(), sim_out.data(), rows, cols, {});
  float* d_in = to_device(in);
  float* d_out = to_device(std::vector<float>(rows * cols, 0.0f));
  mt::cuda::transpose(d_in, d_out, rows, cols, {});
  cuda_ok(cudaDeviceSynchronize(), "transpose");
  check(to_host(d_out, rows * cols) == sim_out, "transpose GPU == simulator");
  cudaFree(d_in);
  cudaFree(d_out);
}

void mma_gemm_matches() {
  const int m = 64, n = 32, k = 64;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<std::uint16_t> a(m * k), b(k * n);
  for (auto& v : a) v = mt::simulator::float_to_half_bits(float(small(rng)));
  for (auto& v : b) v = mt::simulator::float_to_half_bits(float(small(rng)));
  std::vector<float> sim_c(m * n);
  mt::sim::mma_gemm_f16(a.data(), b.data(), sim_c.data(), m, n, k, {});
  auto* d_a = to_device(a);
  auto* d_b = to_device(b);
  float* d_c = to_device(std::vector<float>(m * n, 0.0f));
  mt::cuda::mma_gemm_f16(d_a, d_b, d_c, m, n, k, {});
  cuda_ok(cudaDeviceSynchronize(), "mma_gemm_f16");
  // Small integers: every partial sum is exact, so both must agree bit for bit.
  check(to_host(d_c, m * n) == sim_c, "mma_gemm_f16 GPU == simulator");
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
}

// Hopper only (sm_90): the same tiles through cp.async.bulk and an mbarrier.
void bulk_copy_matches() {
  int major = 0;
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "compute capability");
  if (major < 9) {
    std::printf("bulk_copy_scale: needs sm_90, skipped on sm_%d0\n", major);
    return;
  }
  const int tiles = 6, n = tiles * 256;
  std::vector<float> in(n), sim_out(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97) - 40.0f;
  mt::sim::bulk_copy_scale(in.data(), sim_out.data(), 3.0f, tiles, {});
  float* d_in = to_device(in);
  float* d_out = to_device(std::vector<float>(n, 0.0f));
  mt::cuda::bulk_copy_scale(d_in, d_out, 3.0f, tiles, {});
  cuda_ok(cudaDeviceSynchronize(), "bulk_copy_scale");
  check(to_host(d_out, n) == sim_out, "bulk_copy_scale GPU == simulator");
  cudaFree(d_in);
  cudaFree(d_out);
}

}  // namespace

// Hopper only (sm_90a): TMA + wgmma, the simulator's model of both checked
// against the chip (the swizzled shared-memory bytes and the product).
void tma_wgmma_matches() {
  int major = 0;
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "compute capability");
  if (major != 9) {
    std::printf("tma_wgmma_tile: needs sm_90, skipped on sm_%d0\n", major);
    return;
  }
  constexpr int kN = 64;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<std::uint16_t> a(kN * kN), b(kN * kN), sim_shared(kN * kN);
  for (auto& v : a) v = mt::simulator::float_to_half_bits(float(small(rng)));
  for (auto& v : b) v = mt::simulator::float_to_half_bits(float(small(rng)));
  std::vector<float> sim_c(kN * kN);
  mt::sim::tma_wgmma_tile(a.data(), b.data(), sim_c.data(), sim_shared.data(), {});
  std::uint16_t* d_a = to_device(a);
  std::uint16_t* d_b = to_device(b);
  float* d_c = to_device(std::vector<float>(kN * kN, 0.0f));
  std::uint16_t* d_shared = to_device(std::vector<std::uint16_t>(kN * kN, 0));
  mt::cuda::tma_wgmma_tile(d_a, d_b, d_c, d_shared, {});
  cuda_ok(cudaDeviceSynchronize(), "tma_wgmma_tile");
  check(to_host(d_shared, kN * kN) == sim_shared, "tma_wgmma_tile: TMA's swizzled tile, GPU == simulator");
  check(to_host(d_c, kN * kN) == sim_c, "tma_wgmma_tile: wgmma product, GPU == simulator");
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
  cudaFree(d_shared);
}

// FP8 on the chip: the hardware cvt against runtime/fp8.h's conversion over
// every f32 whose low 16 bits are zero (all exponents and signs, the FP8
// rounding boundaries of both formats among them, infinities and NaNs), and
// the FP8 wgmma (k32, E4M3) on small integers, with and without promotion.
void fp8_matches() {
  int major = 0, minor = 0;
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "compute capability");
  cuda_ok(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "compute capability");
  if (major * 10 + minor < 89) {
    std::printf("fp8: needs sm_89, skipped on sm_%d%d\n", major, minor);
    return;
  }
  const int pairs = 1 << 15;
  std::vector<float> in(2 * pairs);
  for (std::uint32_t i = 0; i < in.size(); ++i) {
    const std::uint32_t bits = i << 16;
    std::memcpy(&in[i], &bits, 4);
  }
  std::vector<std::uint16_t> sim_e4m3(pairs), sim_e5m2(pairs);
  mt::sim::fp8_convert_pairs(in.data(), sim_e4m3.data(), sim_e5m2.data(), pairs, {});
  float* d_in = to_device(in);
  std::uint16_t* d_e4m3 = to_device(std::vector<std::uint16_t>(pairs, 0));
  std::uint16_t* d_e5m2 = to_device(std::vector<std::uint16_t>(pairs, 0));
  mt::cuda::fp8_convert_pairs(d_in, d_e4m3, d_e5m2, pairs, {});
  cuda_ok(cudaDeviceSynchronize(), "fp8_convert_pairs");
  check(to_host(d_e4m3, pairs) == sim_e4m3, "cvt.rn.satfinite.e4m3x2.f32 GPU == runtime/fp8.h");
  check(to_host(d_e5m2, pairs) == sim_e5m2, "cvt.rn.satfinite.e5m2x2.f32 GPU == runtime/fp8.h");
  cudaFree(d_in);
  cudaFree(d_e4m3);
  cudaFree(d_e5m2);
  if (major != 9) {
    std::printf("fp8_wgmma_gemm: needs sm_90, skipped on sm_%d%d\n", major, minor);
    return;
  }
  const int k = 512;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<std::uint8_t> a(64 * k), b(64 * k);
  for (auto& v : a) v = mt::f32_to_e4m3_bits(float(small(rng)));
  for (auto& v : b) v = mt::f32_to_e4m3_bits(float(small(rng)));
  std::uint8_t* d_a = to_device(a);
  std::uint8_t* d_b = to_device(b);
  float* d_c = to_device(std::vector<float>(64 * 64, 0.0f));
  for (bool promote : {false, true}) {
    std::vector<float> sim_c(64 * 64);
    mt::sim::fp8_wgmma_gemm(a.data(), b.data(), sim_c.data(), k, promote, {});
    mt::cuda::fp8_wgmma_gemm(d_a, d_b, d_c, k, promote, {});
    cuda_ok(cudaDeviceSynchronize(), "fp8_wgmma_gemm");
    check(to_host(d_c, 64 * 64) == sim_c,
          promote ? "fp8_wgmma_gemm (promoted) GPU == simulator" : "fp8_wgmma_gemm GPU == simulator");
  }
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  block_sum_matches();
  transpose_matches();
  mma_gemm_matches();
  bulk_copy_matches();
  tma_wgmma_matches();
  fp8_matches();
  return failures == 0 ? 0 : 1;
}
