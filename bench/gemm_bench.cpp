// The GEMM ladder benchmark: every version of kernels/gemm/ladder side by side
// with cuBLASLt, on the GPU.
//
//   gemm_bench [--size N | --mnk M N K] [--dtypes f16,bf16,f32] [--layout NN|NT|TN] [--min-ms 300]
//              [--rungs 1-8]   (the ladder versions to time, e.g. 5-8 at 8192^3)
//
// For each dtype it times cuBLASLt (the baseline) and v1..v8 (v4..v8 only for
// f16/bf16; v6..v8 only on an sm_90 GPU) on C = A @ B, reports TFLOP/s (2*M*N*K flops per GEMM), % of
// cuBLASLt, and the largest difference from cuBLASLt's result relative to
// max |C| (so a fast wrong kernel shows up). Exits 1 when a version differs
// from cuBLASLt by more than the dtype's tolerance (so a small run doubles as
// the GPU correctness test of both back ends), 77 without a GPU, so CTest
// (and tools/scripts/gpu_check.sh) report it skipped.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/half.h"
#include "kernels/gemm/api.h"

namespace {

using mt::kernels::GemmArgs;
using mt::kernels::KernelDType;

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "gemm_bench: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

size_t element_bytes(KernelDType t) { return t == KernelDType::F64 ? 8 : t == KernelDType::F32 ? 4 : 2; }

std::vector<unsigned char> random_host(KernelDType t, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<unsigned char> bytes(n * element_bytes(t));
  for (size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (t == KernelDType::F32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (t == KernelDType::F64) {
      const double d = v;
      std::memcpy(&bytes[i * 8], &d, 8);
    } else {
      const uint16_t h = t == KernelDType::F16 ? mt::f32_to_f16_bits(v) : mt::f32_to_bf16_bits(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<double> to_doubles(KernelDType t, const std::vector<unsigned char>& bytes) {
  const size_t n = bytes.size() / element_bytes(t);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == KernelDType::F32) {
      float v;
      std::memcpy(&v, &bytes[i * 4], 4);
      out[i] = v;
    } else if (t == KernelDType::F64) {
      std::memcpy(&out[i], &bytes[i * 8], 8);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = t == KernelDType::F16 ? mt::f16_bits_to_f32(h) : mt::bf16_bits_to_f32(h);
    }
  }
  return out;
}

// Mean milliseconds per call: one warm-up, then repeat until min_ms has passed.
double time_ms(const std::function<void()>& run, double min_ms) {
  run();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  int iterations = 1;
  double ms = 0;
  for (;;) {
    check(cudaEventRecord(start), "record");
    for (int i = 0; i < iterations; ++i) run();
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float elapsed = 0;
    check(cudaEventElapsedTime(&elapsed, start, stop), "elapsed");
    ms = elapsed / iterations;
    if (elapsed >= min_ms || iterations >= 1000) break;
    iterations = std::max(iterations * 2, static_cast<int>(min_ms / std::max(ms, 1e-3)) + 1);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

KernelDType parse_dtype(const std::string& s) {
  if (s == "f16") return KernelDType::F16;
  if (s == "bf16") return KernelDType::BF16;
  if (s == "f32") return KernelDType::F32;
  if (s == "f64") return KernelDType::F64;
  std::fprintf(stderr, "gemm_bench: unknown dtype '%s' (f16, bf16, f32, f64)\n", s.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int m = 4096, n = 4096, k = 4096;
  std::string dtypes = "f16,bf16,f32", layout = "NN";
  double min_ms = 300;
  int first_rung = 1, last_rung = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--size" && i + 1 < argc) {
      m = n = k = std::atoi(argv[++i]);
    } else if (arg == "--mnk" && i + 3 < argc) {
      m = std::atoi(argv[++i]), n = std::atoi(argv[++i]), k = std::atoi(argv[++i]);
    } else if (arg == "--dtypes" && i + 1 < argc) {
      dtypes = argv[++i];
    } else if (arg == "--layout" && i + 1 < argc) {
      layout = argv[++i];
    } else if (arg == "--min-ms" && i + 1 < argc) {
      min_ms = std::atof(argv[++i]);
    } else if (arg == "--rungs" && i + 1 < argc && std::sscanf(argv[i + 1], "%d-%d", &first_rung, &last_rung) == 2) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--size N | --mnk M N K] [--dtypes f16,bf16,f32] [--layout NN|NT|TN] "
                   "[--min-ms MS] [--rungs FIRST-LAST]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gemm_bench: no CUDA device available; skipping\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const bool trans_a = layout == "TN", trans_b = layout == "NT";
  std::printf("# GEMM ladder: %s, M=%d N=%d K=%d, layout %s, C = A @ B, f32 accumulation\n\n", prop.name, m, n, k,
              layout.c_str());
  std::printf("| dtype | version | ms | TFLOP/s | %% of cuBLASLt | max rel. diff vs cuBLASLt |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");

  bool all_close = true;
  size_t start = 0;
  while (start <= dtypes.size()) {
    const size_t comma = dtypes.find(',', start);
    const std::string name = dtypes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? dtypes.size() + 1 : comma + 1;
    if (name.empty()) continue;
    const KernelDType dtype = parse_dtype(name);
    const size_t bytes = element_bytes(dtype);
    const size_t a_count = static_cast<size_t>(m) * k, b_count = static_cast<size_t>(k) * n,
                 c_count = static_cast<size_t>(m) * n;
    void *a = nullptr, *b = nullptr, *c = nullptr, *c_ref = nullptr;
    check(cudaMalloc(&a, a_count * bytes), "cudaMalloc A");
    check(cudaMalloc(&b, b_count * bytes), "cudaMalloc B");
    check(cudaMalloc(&c, c_count * bytes), "cudaMalloc C");
    check(cudaMalloc(&c_ref, c_count * bytes), "cudaMalloc C_ref");
    check(cudaMemcpy(a, random_host(dtype, a_count, 1).data(), a_count * bytes, cudaMemcpyHostToDevice), "copy A");
    check(cudaMemcpy(b, random_host(dtype, b_count, 2).data(), b_count * bytes, cudaMemcpyHostToDevice), "copy B");

    GemmArgs args;
    args.dtype = dtype;
    args.m = m, args.n = n, args.k = k;
    args.a = a, args.lda = trans_a ? m : k, args.trans_a = trans_a;
    args.b = b, args.ldb = trans_b ? k : n, args.trans_b = trans_b;
    args.ldc = n;
    const double flops = 2.0 * m * n * k;

    args.c = c_ref;
    const double lt_ms = time_ms([&] { mt::cuda::gemm_cublaslt(args, {}); }, min_ms);
    std::vector<unsigned char> ref_bytes(c_count * bytes);
    check(cudaMemcpy(ref_bytes.data(), c_ref, c_count * bytes, cudaMemcpyDeviceToHost), "copy C_ref");
    const std::vector<double> ref = to_doubles(dtype, ref_bytes);
    double ref_max = 0;
    for (double v : ref) ref_max = std::max(ref_max, std::abs(v));
    std::printf("| %s | cuBLASLt | %.3f | %.1f | 100.0 | 0 |\n", name.c_str(), lt_ms, flops / lt_ms / 1e9);

    struct Version {
      const char* name;
      void (*fn)(const GemmArgs&, mt::kernels::Stream);
      bool tensor_core;
      bool hopper = false;
    };
    const Version versions[] = {{"v1 naive", mt::cuda::gemm_v1_naive, false},
                                {"v2 shared tiles", mt::cuda::gemm_v2_shared_tiles, false},
                                {"v3 register blocking", mt::cuda::gemm_v3_register_blocking, false},
                                {"v4 mma.sync + ldmatrix", mt::cuda::gemm_v4_tensor_core, true},
                                {"v5 cp.async pipeline", mt::cuda::gemm_v5_pipelined, true},
                                {"v6 TMA + wgmma", mt::cuda::gemm_v6_tma_wgmma, true, true},
                                {"v7 warp-specialised, persistent", mt::cuda::gemm_v7_warp_specialized, true, true},
                                {"v8 2-block clusters, TMA multicast", mt::cuda::gemm_v8_clusters, true, true}};
    const bool low_precision = dtype == KernelDType::F16 || dtype == KernelDType::BF16;
    for (const Version& v : versions) {
      const int rung = static_cast<int>(&v - versions) + 1;
      if (rung < first_rung || rung > last_rung) continue;
      if (v.tensor_core && !low_precision) continue;
      args.c = c;
      if (v.hopper && !mt::cuda::gemm_hopper_supports(args)) {
        std::printf("| %s | %s | - | - | - | skipped: needs an sm_90 GPU |\n", name.c_str(), v.name);
        continue;
      }
      check(cudaMemset(c, 0, c_count * bytes), "memset C");
      const double ms = time_ms([&] { v.fn(args, {}); }, min_ms);
      std::vector<unsigned char> out_bytes(c_count * bytes);
      check(cudaMemcpy(out_bytes.data(), c, c_count * bytes, cudaMemcpyDeviceToHost), "copy C");
      const std::vector<double> out = to_doubles(dtype, out_bytes);
      double diff = 0;
      for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::abs(out[i] - ref[i]));
      if (std::isnan(diff)) diff = INFINITY;
      const double relative = diff / std::max(ref_max, 1e-30);
      const double tolerance = dtype == KernelDType::BF16 ? 2e-2 : dtype == KernelDType::F16 ? 4e-3 : 1e-4;
      const bool close = relative <= tolerance;
      all_close = all_close && close;
      std::printf("| %s | %s | %.3f | %.1f | %.1f | %.2e%s |\n", name.c_str(), v.name, ms, flops / ms / 1e9,
                  100.0 * lt_ms / ms, relative, close ? "" : " MISMATCH");
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(c_ref);
  }
  if (!all_close) std::printf("\ngemm_bench: some version differs from cuBLASLt beyond its dtype's tolerance\n");
  return all_close ? 0 : 1;
}
