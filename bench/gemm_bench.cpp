// The GEMM ladder benchmark: every version of kernels/gemm/ladder side by side
// with cuBLASLt, on the GPU.
//
//   gemm_bench [--size N | --mnk M N K] [--dtypes f16,bf16,f32,fp8,int8] [--layout NN|NT|TN] [--min-ms 300]
//              [--rungs 1-8]   (the ladder versions to time, e.g. 5-8 at 8192^3)
//
// fp8 times cuBLASLt's FP8 GEMM and ladder v10 (per-tensor and block scales)
// on E4M3 operands in the "TN" layout FP8 needs (--layout does not apply).
// int8 times cuBLASLt's INT8 GEMM, the INT8 vendor path around it and ladder
// v9 on u8 x s8 operands, "TN" likewise; its TFLOP/s column is TOPS, and its
// % column is against the vendor path.
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

#include "kernels/gemm/api.h"
#include "runtime/fp8.h"
#include "runtime/half.h"

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

struct Options {
  int m = 4096, n = 4096, k = 4096;
  std::string dtypes = "f16,bf16,f32", layout = "NN";
  double min_ms = 300;
  int first_rung = 1, last_rung = 8;
};

// Reads the flags; false, after printing the usage, on anything else.
bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--size" && i + 1 < argc) {
      o.m = o.n = o.k = std::atoi(argv[++i]);
    } else if (arg == "--mnk" && i + 3 < argc) {
      o.m = std::atoi(argv[++i]), o.n = std::atoi(argv[++i]), o.k = std::atoi(argv[++i]);
    } else if (arg == "--dtypes" && i + 1 < argc) {
      o.dtypes = argv[++i];
    } else if (arg == "--layout" && i + 1 < argc) {
      o.layout = argv[++i];
    } else if (arg == "--min-ms" && i + 1 < argc) {
      o.min_ms = std::atof(argv[++i]);
    } else if (arg == "--rungs" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d-%d", &o.first_rung, &o.last_rung) == 2) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--size N | --mnk M N K] [--dtypes f16,bf16,f32] [--layout NN|NT|TN] "
                   "[--min-ms MS] [--rungs FIRST-LAST]\n");
      return false;
    }
  }
  return true;
}

// The comma-separated dtype names, empty ones dropped.
std::vector<std::string> dtype_names(const std::string& dtypes) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= dtypes.size()) {
    const size_t comma = dtypes.find(',', start);
    const std::string name = dtypes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? dtypes.size() + 1 : comma + 1;
    if (name.empty()) continue;
    names.push_back(name);
  }
  return names;
}

void print_header(const cudaDeviceProp& prop, const Options& o) {
  std::printf("# GEMM ladder: %s, M=%d N=%d K=%d, layout %s, C = A @ B, f32 accumulation\n\n", prop.name, o.m, o.n, o.k,
              o.layout.c_str());
  std::printf("| dtype | version | ms | TFLOP/s | %% of cuBLASLt | max rel. diff vs cuBLASLt |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
}

// One dtype's operands on the device: A and B random, C for the versions,
// C_ref for cuBLASLt.
struct Operands {
  size_t bytes = 0, a_count = 0, b_count = 0, c_count = 0;
  void *a = nullptr, *b = nullptr, *c = nullptr, *c_ref = nullptr;
};

Operands allocate_operands(const Options& o, KernelDType dtype) {
  Operands p;
  p.bytes = element_bytes(dtype);
  p.a_count = static_cast<size_t>(o.m) * o.k, p.b_count = static_cast<size_t>(o.k) * o.n,
  p.c_count = static_cast<size_t>(o.m) * o.n;
  check(cudaMalloc(&p.a, p.a_count * p.bytes), "cudaMalloc A");
  check(cudaMalloc(&p.b, p.b_count * p.bytes), "cudaMalloc B");
  check(cudaMalloc(&p.c, p.c_count * p.bytes), "cudaMalloc C");
  check(cudaMalloc(&p.c_ref, p.c_count * p.bytes), "cudaMalloc C_ref");
  check(cudaMemcpy(p.a, random_host(dtype, p.a_count, 1).data(), p.a_count * p.bytes, cudaMemcpyHostToDevice),
        "copy A");
  check(cudaMemcpy(p.b, random_host(dtype, p.b_count, 2).data(), p.b_count * p.bytes, cudaMemcpyHostToDevice),
        "copy B");
  return p;
}

void free_operands(const Operands& p) {
  cudaFree(p.a);
  cudaFree(p.b);
  cudaFree(p.c);
  cudaFree(p.c_ref);
}

// C = A @ B in the chosen layout; args.c is set by whoever runs it.
GemmArgs gemm_args(const Options& o, KernelDType dtype, const Operands& p) {
  const bool trans_a = o.layout == "TN", trans_b = o.layout == "NT";
  GemmArgs args;
  args.dtype = dtype;
  args.m = o.m, args.n = o.n, args.k = o.k;
  args.a = p.a, args.lda = trans_a ? o.m : o.k, args.trans_a = trans_a;
  args.b = p.b, args.ldb = trans_b ? o.k : o.n, args.trans_b = trans_b;
  args.ldc = o.n;
  return args;
}

// One dtype's GEMM problem.
struct Problem {
  std::string name;
  KernelDType dtype;
  Operands operands;
  GemmArgs args;
  double flops;
};

// A result matrix copied back to the host, as doubles.
std::vector<double> read_back(const Problem& pb, const void* c, const char* what) {
  const Operands& p = pb.operands;
  std::vector<unsigned char> bytes(p.c_count * p.bytes);
  check(cudaMemcpy(bytes.data(), c, p.c_count * p.bytes, cudaMemcpyDeviceToHost), what);
  return to_doubles(pb.dtype, bytes);
}

// cuBLASLt's time and result: the baseline of every version.
struct Reference {
  double ms = 0;
  std::vector<double> values;
  double max_abs = 0;
};

Reference run_cublaslt(const Problem& pb, double min_ms) {
  GemmArgs args = pb.args;
  args.c = pb.operands.c_ref;
  Reference ref;
  ref.ms = time_ms([&] { mt::cuda::gemm_cublaslt(args, {}); }, min_ms);
  ref.values = read_back(pb, pb.operands.c_ref, "copy C_ref");
  for (double v : ref.values) ref.max_abs = std::max(ref.max_abs, std::abs(v));
  std::printf("| %s | cuBLASLt | %.3f | %.1f | 100.0 | 0 |\n", pb.name.c_str(), ref.ms, pb.flops / ref.ms / 1e9);
  return ref;
}

struct Version {
  const char* name;
  void (*fn)(const GemmArgs&, mt::kernels::Stream);
  bool tensor_core;
  bool hopper = false;
};
const Version kVersions[] = {{"v1 naive", mt::cuda::gemm_v1_naive, false},
                             {"v2 shared tiles", mt::cuda::gemm_v2_shared_tiles, false},
                             {"v3 register blocking", mt::cuda::gemm_v3_register_blocking, false},
                             {"v4 mma.sync + ldmatrix", mt::cuda::gemm_v4_tensor_core, true},
                             {"v5 cp.async pipeline", mt::cuda::gemm_v5_pipelined, true},
                             {"v6 TMA + wgmma", mt::cuda::gemm_v6_tma_wgmma, true, true},
                             {"v7 warp-specialised, persistent", mt::cuda::gemm_v7_warp_specialized, true, true},
                             {"v8 2-block clusters, TMA multicast", mt::cuda::gemm_v8_clusters, true, true}};

// One version's row; false when it differs from cuBLASLt beyond the dtype's tolerance.
bool time_version(const Version& v, const GemmArgs& args, const Problem& pb, const Reference& ref, double min_ms) {
  const Operands& p = pb.operands;
  check(cudaMemset(p.c, 0, p.c_count * p.bytes), "memset C");
  const double ms = time_ms([&] { v.fn(args, {}); }, min_ms);
  const std::vector<double> out = read_back(pb, p.c, "copy C");
  double diff = 0;
  for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::abs(out[i] - ref.values[i]));
  if (std::isnan(diff)) diff = INFINITY;
  const double relative = diff / std::max(ref.max_abs, 1e-30);
  const KernelDType dtype = pb.dtype;
  const double tolerance = dtype == KernelDType::BF16 ? 2e-2 : dtype == KernelDType::F16 ? 4e-3 : 1e-4;
  const bool close = relative <= tolerance;
  std::printf("| %s | %s | %.3f | %.1f | %.1f | %.2e%s |\n", pb.name.c_str(), v.name, ms, pb.flops / ms / 1e9,
              100.0 * ref.ms / ms, relative, close ? "" : " MISMATCH");
  return close;
}

// The chosen rungs of the ladder; false when one differs from cuBLASLt.
bool time_versions(const Problem& pb, const Reference& ref, const Options& o) {
  const bool low_precision = pb.dtype == KernelDType::F16 || pb.dtype == KernelDType::BF16;
  bool all_close = true;
  for (const Version& v : kVersions) {
    const int rung = static_cast<int>(&v - kVersions) + 1;
    if (rung < o.first_rung || rung > o.last_rung) continue;
    if (v.tensor_core && !low_precision) continue;
    GemmArgs args = pb.args;
    args.c = pb.operands.c;
    if (v.hopper && !mt::cuda::gemm_hopper_supports(args)) {
      std::printf("| %s | %s | - | - | - | skipped: needs an sm_90 GPU |\n", pb.name.c_str(), v.name);
      continue;
    }
    all_close = time_version(v, args, pb, ref, o.min_ms) && all_close;
  }
  return all_close;
}

// ---- fp8 (--dtypes ...,fp8): cuBLASLt's FP8 GEMM and ladder v10 -----------

// A [m, k] and B [n, k] E4M3 (values in [-2, 2]), unit scales, bf16 out: "TN",
// the layout every FP8 Tensor Core GEMM reads. Rows: cuBLASLt FP8 (per-tensor
// scales, fast accumulation off), v10 per-tensor, v10 with 1x128 / 128x128
// block scales (all ones, so the same product); each against cuBLASLt FP8.
bool bench_fp8(const Options& o) {
  const size_t a_count = static_cast<size_t>(o.m) * o.k, b_count = static_cast<size_t>(o.n) * o.k,
               c_count = static_cast<size_t>(o.m) * o.n;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<std::uint8_t> host_a(a_count), host_b(b_count);
  for (auto& v : host_a) v = mt::f32_to_e4m3_bits(value(rng));
  for (auto& v : host_b) v = mt::f32_to_e4m3_bits(value(rng));
  const int k_blocks = (o.k + 127) / 128, n_blocks = (o.n + 127) / 128;
  const std::vector<float> ones(static_cast<size_t>(std::max(o.m, n_blocks)) * k_blocks, 1.0f);
  void *a = nullptr, *b = nullptr, *c = nullptr, *c_ref = nullptr, *scales = nullptr;
  check(cudaMalloc(&a, a_count), "cudaMalloc A");
  check(cudaMalloc(&b, b_count), "cudaMalloc B");
  check(cudaMalloc(&c, c_count * 2), "cudaMalloc C");
  check(cudaMalloc(&c_ref, c_count * 2), "cudaMalloc C_ref");
  check(cudaMalloc(&scales, ones.size() * sizeof(float)), "cudaMalloc scales");
  check(cudaMemcpy(a, host_a.data(), a_count, cudaMemcpyHostToDevice), "copy A");
  check(cudaMemcpy(b, host_b.data(), b_count, cudaMemcpyHostToDevice), "copy B");
  check(cudaMemcpy(scales, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice), "copy scales");
  mt::kernels::Fp8Gemm g;
  g.m = o.m, g.n = o.n, g.k = o.k;
  g.a = static_cast<const std::uint8_t*>(a), g.b = static_cast<const std::uint8_t*>(b);
  g.a_scale_inv = g.b_scale_inv = static_cast<const float*>(scales);
  g.out_dtype = KernelDType::BF16;
  const double flops = 2.0 * o.m * o.n * o.k;
  auto read = [&](const void* from) {
    std::vector<unsigned char> bytes(c_count * 2);
    check(cudaMemcpy(bytes.data(), from, bytes.size(), cudaMemcpyDeviceToHost), "copy C");
    return to_doubles(KernelDType::BF16, bytes);
  };
  g.out = c_ref;
  const double ref_ms = time_ms([&] { mt::cuda::fp8_gemm_cublaslt(g, nullptr, {}); }, o.min_ms);
  const std::vector<double> ref = read(c_ref);
  double max_abs = 0;
  for (double v : ref) max_abs = std::max(max_abs, std::abs(v));
  std::printf("| fp8 e4m3 | cuBLASLt FP8 | %.3f | %.1f | 100.0 | 0 |\n", ref_ms, flops / ref_ms / 1e9);
  bool all_close = true;
  for (const bool blocks : {false, true}) {
    g.out = c;
    g.block_scales = blocks;
    check(cudaMemset(c, 0, c_count * 2), "memset C");
    const double ms = time_ms([&] { mt::cuda::fp8_gemm_v10_wgmma(g, {}); }, o.min_ms);
    const std::vector<double> out = read(c);
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::abs(out[i] - ref[i]));
    if (std::isnan(diff)) diff = INFINITY;
    const double relative = diff / std::max(max_abs, 1e-30);
    const bool close = relative <= 2e-2;  // bf16 out
    std::printf("| fp8 e4m3 | v10 FP8 wgmma, %s | %.3f | %.1f | %.1f | %.2e%s |\n",
                blocks ? "1x128 / 128x128 block scales" : "per-tensor scales", ms, flops / ms / 1e9,
                100.0 * ref_ms / ms, relative, close ? "" : " MISMATCH");
    all_close = all_close && close;
  }
  for (void* p : {a, b, c, c_ref, scales}) cudaFree(p);
  return all_close;
}

// ---- int8 (--dtypes ...,int8): cuBLASLt's INT8 GEMM and ladder v9 ---------

// INT8 inference's GEMM (Int8Gemm): A [m, k] u8 with zero point 128, B [n, k]
// s8 (full range), unit scales, f32 out, "TN". Rows: cuBLASLt's s8 x s8 ->
// s32 GEMM alone (the baseline: what the vendor's kernels reach), the
// vendor path (mixtape's u8 -> s8 shift + that GEMM + its epilogue, what an
// INT8 Linear runs under MT_GEMM=cublaslt) and the v9 rung; TOPS count 2mnk
// operations. v9 and the vendor path must agree bit for bit (exact sums,
// the same epilogue).
bool bench_int8(const Options& o) {
  const size_t a_count = static_cast<size_t>(o.m) * o.k, b_count = static_cast<size_t>(o.n) * o.k,
               c_count = static_cast<size_t>(o.m) * o.n;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> host_a(a_count), host_b(b_count);
  for (auto& v : host_a) v = static_cast<std::uint8_t>(byte(rng));
  for (auto& v : host_b) v = static_cast<std::uint8_t>(byte(rng));  // read as s8: [-128, 127]
  const std::vector<float> unit_scales(static_cast<size_t>(o.n), 1.0f);
  void *a = nullptr, *b = nullptr, *scales = nullptr, *c_vendor = nullptr, *c_v9 = nullptr, *a_s8 = nullptr,
       *sums = nullptr, *product = nullptr;
  check(cudaMalloc(&a, a_count), "cudaMalloc A");
  check(cudaMalloc(&b, b_count), "cudaMalloc B");
  check(cudaMalloc(&scales, unit_scales.size() * sizeof(float)), "cudaMalloc scales");
  check(cudaMalloc(&c_vendor, c_count * 4), "cudaMalloc C");
  check(cudaMalloc(&c_v9, c_count * 4), "cudaMalloc C");
  check(cudaMalloc(&a_s8, a_count), "cudaMalloc A as s8");
  check(cudaMalloc(&sums, static_cast<size_t>(o.n) * 4), "cudaMalloc weight sums");
  check(cudaMalloc(&product, c_count * 4), "cudaMalloc s32 product");
  check(cudaMemcpy(a, host_a.data(), a_count, cudaMemcpyHostToDevice), "copy A");
  check(cudaMemcpy(b, host_b.data(), b_count, cudaMemcpyHostToDevice), "copy B");
  check(cudaMemcpy(scales, unit_scales.data(), unit_scales.size() * sizeof(float), cudaMemcpyHostToDevice),
        "copy scales");
  mt::kernels::Int8Gemm g;
  g.m = o.m, g.n = o.n, g.k = o.k, g.a_zero_point = 128;
  g.a = static_cast<const std::uint8_t*>(a), g.b = static_cast<const std::int8_t*>(b);
  g.scales = static_cast<const float*>(scales);
  const mt::kernels::Int8VendorScratch scratch{static_cast<std::int8_t*>(a_s8), static_cast<std::int32_t*>(sums),
                                               static_cast<std::int32_t*>(product)};
  const double ops = 2.0 * o.m * o.n * o.k;
  auto read = [&](const void* from) {
    std::vector<unsigned char> bytes(c_count * 4);
    check(cudaMemcpy(bytes.data(), from, bytes.size(), cudaMemcpyDeviceToHost), "copy C");
    return to_doubles(KernelDType::F32, bytes);
  };
  const bool vendor_takes = mt::kernels::int8_vendor_takes(g);
  double vendor_ms = 0;
  std::vector<double> vendor_out;
  if (vendor_takes) {
    const double lt_ms = time_ms(
        [&] {
          mt::cuda::int8_s8_gemm_cublaslt(g.m, g.n, g.k, static_cast<const std::int8_t*>(a_s8), g.b,
                                          static_cast<std::int32_t*>(product), {});
        },
        o.min_ms);
    std::printf("| int8 | cuBLASLt s8 GEMM alone (s32 out) | %.3f | %.1f | 100.0 | - |\n", lt_ms, ops / lt_ms / 1e9);
    vendor_ms = time_ms([&] { mt::cuda::int8_gemm_vendor(g, scratch, c_vendor, false, {}); }, o.min_ms);
    vendor_out = read(c_vendor);
    std::printf("| int8 | vendor path: shift + cuBLASLt + epilogue | %.3f | %.1f | %.1f | - |\n", vendor_ms,
                ops / vendor_ms / 1e9, 100.0 * lt_ms / vendor_ms);
  } else {
    std::printf("| int8 | cuBLASLt (needs N and K multiples of 4) | - | - | - | - |\n");
  }
  const double v9_ms = time_ms([&] { mt::cuda::int8_gemm_v9_mma(g, c_v9, false, {}); }, o.min_ms);
  bool same = true;
  std::string diff = "-";
  if (vendor_takes) {
    const std::vector<double> v9_out = read(c_v9);
    same = v9_out == vendor_out;
    diff = same ? "0 (bit for bit)" : "MISMATCH";
  }
  char share[32] = "-";
  if (vendor_takes) std::snprintf(share, sizeof share, "%.1f", 100.0 * vendor_ms / v9_ms);
  std::printf("| int8 | v9 INT8 mma.sync | %.3f | %.1f | %s | %s |\n", v9_ms, ops / v9_ms / 1e9, share, diff.c_str());
  for (void* p : {a, b, scales, c_vendor, c_v9, a_s8, sums, product}) cudaFree(p);
  return same;
}

// One dtype's rows: cuBLASLt, then each version; false on a mismatch.
bool bench_dtype(const Options& o, const std::string& name) {
  if (name == "fp8") return bench_fp8(o);
  if (name == "int8") return bench_int8(o);
  Problem pb;
  pb.name = name;
  pb.dtype = parse_dtype(name);
  pb.operands = allocate_operands(o, pb.dtype);
  pb.args = gemm_args(o, pb.dtype, pb.operands);
  pb.flops = 2.0 * o.m * o.n * o.k;
  const Reference ref = run_cublaslt(pb, o.min_ms);
  const bool all_close = time_versions(pb, ref, o);
  free_operands(pb.operands);
  return all_close;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) return 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gemm_bench: no CUDA device available; skipping\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  print_header(prop, options);

  bool all_close = true;
  for (const std::string& name : dtype_names(options.dtypes)) all_close = bench_dtype(options, name) && all_close;
  if (!all_close) std::printf("\ngemm_bench: some version differs from cuBLASLt beyond its dtype's tolerance\n");
  return all_close ? 0 : 1;
}
