// The production GEMM entry: mt::{sim,cuda}::gemm picks an implementation.
//
// What: C[b] = act(op(A[b]) @ op(B[b]) + bias), the kernel behind
//   mt::kernels::bmm (kernels/gemm/matmul.h) and Linear.
// Algorithm: no kernel of its own — it chooses one.
//   own back end: f16/bf16 -> ladder v7 (TMA + wgmma, warp-specialised,
//                 persistent) where TMA can read the operands and the device
//                 is Hopper (always on the simulator), else v5 (cp.async
//                 pipeline + mma.sync),
//                 f32 -> v3 (register-blocked, true FP32),
//                 f64 -> v2 (shared-memory tiles).
//   cuBLASLt back end (GPU build only): cublasLtMatmul with the row-major
//     problem expressed as its column-major transpose, C^T = op(B)^T op(A)^T,
//     and the bias / ReLU as a cuBLASLt epilogue (GELU as a second pass, see
//     gemm_cublaslt: cuBLASLt's own GELU is the tanh form). FP32 runs
//     CUBLAS_COMPUTE_32F unless GemmArgs::allow_tf32 asks for TF32.
//   Selection: an explicit GemmBackend wins (the dispatcher asks for cuBLASLt,
//   or on the simulator Reference = v1, when the own rung has not passed its
//   check on this device: kernels/verify/trust.h); Auto reads MT_GEMM
//   (auto|own|cublaslt). auto means: own kernels in the simulator; on a GPU a
//   measured trial per shape (gemm_choice.h): the first GEMM of each shape
//   runs both back ends (a warm-up and 3 timed calls each, then a host
//   compare of their outputs) and the faster one that agrees with cuBLASLt
//   serves that shape from then on (an own kernel that throws loses). A trial synchronises, so none runs while
//   a CUDA graph is being captured: an untried shape then takes cuBLASLt.
//   MT_GEMM=cublaslt in a simulator run falls back to own (there is no
//   cuBLASLt without a GPU); an explicit GemmBackend::CublasLt there throws.
// Precision: as the chosen kernel (f32 accumulation, one rounding).
// INT8: int8_s8_gemm_cublaslt is cuBLASLt's s8 x s8 -> s32 GEMM, the middle
//   step of INT8's vendor path (int8_vendor.cu; chosen in int8.h).
// Bound / speed: see the versions. cuBLASLt at 4096^3 (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md):
//   f16 679 TFLOP/s, bf16 715, true FP32 51.2; the own v5 reaches 29% of it.
//   v6-v8 are not measured yet. v8 (clusters) is a ladder rung only: nothing
//   here picks it.
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/gemm/api.h"
#include "kernels/gemm/gemm_choice.h"
#include "kernels/gemm/ladder/gemm_common.h"
#include "runtime/launch.h"

#if !MT_SIM_BUILD
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "runtime/half.h"
#endif

namespace mt::MT_KERNEL_NS {
namespace {

using kernels::GemmArgs;
using kernels::GemmBackend;
using kernels::KernelDType;

// The back end a request names, before any trial: Auto stays Auto only for
// MT_GEMM=auto (or unset) on a GPU.
GemmBackend resolve(GemmBackend requested) {
  if (requested != GemmBackend::Auto) return requested;
  const GemmBackend from_env = kernels::gemm_backend_from_environment();
#if MT_SIM_BUILD
  (void)from_env;
  return GemmBackend::Own;  // no cuBLASLt in the simulator
#else
  return from_env;
#endif
}

void gemm_own(const GemmArgs& args, Stream stream) {
  switch (args.dtype) {
    case KernelDType::F16:
    case KernelDType::BF16:
      if (gemm_hopper_supports(args)) {
        gemm_v7_warp_specialized(args, stream);
      } else {
        gemm_v5_pipelined(args, stream);
      }
      return;
    case KernelDType::F32: gemm_v3_register_blocking(args, stream); return;
    case KernelDType::F64: gemm_v2_shared_tiles(args, stream); return;
  }
}

#if !MT_SIM_BUILD

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

constexpr std::size_t kWorkspaceBytes = 32u << 20;

struct CublasLtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

CublasLtContext& cublaslt_context() {
  static CublasLtContext context;
  static std::once_flag once;
  std::call_once(once, [] {
    check_cublas(cublasLtCreate(&context.handle), "cublasLtCreate");
    if (cudaMalloc(&context.workspace, kWorkspaceBytes) != cudaSuccess) {
      throw std::runtime_error("cuBLASLt: could not allocate the 32 MiB workspace");
    }
  });
  return context;
}

cudaDataType_t data_type(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::F16: return CUDA_R_16F;
    case KernelDType::BF16: return CUDA_R_16BF;
    case KernelDType::F32: return CUDA_R_32F;
    case KernelDType::F64: return CUDA_R_64F;
  }
  return CUDA_R_32F;
}

// RAII for the descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The fused epilogue both GEMMs take from cuBLASLt: + bias[n] and/or ReLU.
void set_bias_relu_epilogue(cublasLtMatmulDesc_t op, const void* bias, kernels::GemmActivation activation) {
  const bool relu = activation == kernels::GemmActivation::Relu;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (bias != nullptr) {
    epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  } else if (relu) {
    epilogue = CUBLASLT_EPILOGUE_RELU;
  }
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "epilogue");
  if (bias != nullptr) {
    check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                 "bias pointer");
  }
}

void set_batch(cublasLtMatrixLayout_t layout, int batch, int64_t stride) {
  check_cublas(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
               "batch count");
  check_cublas(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
      "batch stride");
}

// Column-major "TN", what cuBLASLt's FP8 and INT8 kernels require, for A
// [m, k] and B [n, k] both stored row-major (K-contiguous): out^T (n x m) =
// B (stored [n, k]: op T) x A^T (stored [m, k]: op N), so cuBLASLt's A is
// our B and the other way round.
void set_tn_layout(cublasLtMatmulDesc_t op) {
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof(transposed)),
               "transa");
  check_cublas(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)), "transb");
}

// cuBLASLt's best algorithm for the described product, within the workspace.
cublasLtMatmulAlgo_t best_algorithm(CublasLtContext& context, LtDescriptors& d, const char* what) {
  check_cublas(cublasLtMatmulPreferenceCreate(&d.preference), "preference");
  check_cublas(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &kWorkspaceBytes, sizeof(kWorkspaceBytes)),
               "workspace preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  check_cublas(
      cublasLtMatmulAlgoGetHeuristic(context.handle, d.op, d.a, d.b, d.c, d.c, d.preference, 1, &heuristic, &found),
      "algorithm heuristic");
  if (found == 0) throw std::runtime_error(std::string("cuBLASLt: no algorithm for this ") + what);
  return heuristic.algo;
}

#endif

}  // namespace

void gemm_cublaslt(const GemmArgs& args, Stream stream) {
#if MT_SIM_BUILD
  (void)args;
  (void)stream;
  throw std::invalid_argument("gemm: the cuBLASLt back end needs a GPU build; the sim device runs own kernels only");
#else
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  if (args.k == 0) {  // cuBLASLt rejects k == 0; the own kernels handle the epilogue-only case
    gemm_own(args, stream);
    return;
  }
  // cuBLASLt's GELU epilogue is the tanh approximation and writes its aux
  // (pre-activation) in a layout of its own: GELU, and any request for the
  // pre-activation, runs as bias-GEMM into Z, then one activation pass.
  if (args.activation == kernels::GemmActivation::GeluErf || args.activation == kernels::GemmActivation::GeluTanh ||
      (args.pre_activation != nullptr && args.activation != kernels::GemmActivation::None)) {
    GemmArgs linear_part = args;
    linear_part.activation = kernels::GemmActivation::None;
    linear_part.pre_activation = nullptr;
    if (args.pre_activation != nullptr) linear_part.c = args.pre_activation;
    gemm_cublaslt(linear_part, stream);
    gemm_detail::launch_activation_pass(args, stream);
    return;
  }
  CublasLtContext& context = cublaslt_context();
  const cudaDataType_t type = data_type(args.dtype);
  const bool f64 = args.dtype == KernelDType::F64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                      : (args.dtype == KernelDType::F32 && args.allow_tf32)
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
  LtDescriptors d;
  check_cublas(cublasLtMatmulDescCreate(&d.op, compute, scale_type), "matmul descriptor");
  // Column-major view: C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
  const cublasOperation_t op_first = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
               "transa");
  check_cublas(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
               "transb");
  set_bias_relu_epilogue(d.op, args.bias, args.activation);
  const uint64_t n = static_cast<uint64_t>(args.n), m = static_cast<uint64_t>(args.m),
                 k = static_cast<uint64_t>(args.k);
  check_cublas(cublasLtMatrixLayoutCreate(&d.a, type, args.trans_b ? k : n, args.trans_b ? n : k, args.ldb),
               "layout of B");
  check_cublas(cublasLtMatrixLayoutCreate(&d.b, type, args.trans_a ? m : k, args.trans_a ? k : m, args.lda),
               "layout of A");
  check_cublas(cublasLtMatrixLayoutCreate(&d.c, args.c_is_f32 ? CUDA_R_32F : type, n, m, args.ldc), "layout of C");
  if (args.batch > 1) {
    set_batch(d.a, args.batch, args.batch_stride_b);
    set_batch(d.b, args.batch, args.batch_stride_a);
    set_batch(d.c, args.batch, args.batch_stride_c);
  }
  const cublasLtMatmulAlgo_t algo = best_algorithm(context, d, "GEMM");
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  const ProfiledRegion profiled("cublasLtMatmul", stream);
  check_cublas(cublasLtMatmul(context.handle, d.op, alpha, args.b, d.a, args.a, d.b, beta, args.c, d.c, args.c, d.c,
                              &algo, context.workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream.handle)),
               "cublasLtMatmul");
#endif
}

void fp8_gemm_cublaslt(const kernels::Fp8Gemm& g, float* amax_d, Stream stream) {
#if MT_SIM_BUILD
  (void)g, (void)amax_d, (void)stream;
  throw std::invalid_argument("fp8_gemm_cublaslt: the cuBLASLt back end needs a GPU build");
#else
  if (g.block_scales) throw std::invalid_argument("fp8_gemm_cublaslt: per-tensor scales only (block scales: v10)");
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0 || g.k % 16 != 0) throw std::invalid_argument("fp8_gemm_cublaslt: k must be a positive multiple of 16");
  if (g.activation == kernels::GemmActivation::GeluErf || g.activation == kernels::GemmActivation::GeluTanh)
    throw std::invalid_argument(
        "fp8_gemm_cublaslt: GELU is not in cuBLASLt's epilogue here (its GELU is the tanh form)");
  CublasLtContext& context = cublaslt_context();
  LtDescriptors d;
  check_cublas(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "FP8 matmul descriptor");
  set_tn_layout(d.op);  // the layout cuBLASLt's FP8 kernels require
  // cuBLASLt's A is our B and the other way round: their scales follow.
  check_cublas(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale_inv, sizeof(g.b_scale_inv)),
      "A scale");
  check_cublas(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale_inv, sizeof(g.a_scale_inv)),
      "B scale");
  const std::int8_t fast_accumulate = g.promote ? 0 : 1;
  check_cublas(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulate, sizeof(fast_accumulate)),
      "fast accumulation");
  if (amax_d != nullptr) {
    check_cublas(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax_d, sizeof(amax_d)),
                 "amax of D");
  }
  set_bias_relu_epilogue(d.op, g.bias, g.activation);
  const cudaDataType_t out_type = g.out_dtype == kernels::KernelDType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const uint64_t m = static_cast<uint64_t>(g.m), n = static_cast<uint64_t>(g.n), k = static_cast<uint64_t>(g.k);
  check_cublas(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, k, n, k), "layout of B");
  check_cublas(cublasLtMatrixLayoutCreate(&d.b, g.a_e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, k, m, k), "layout of A");
  check_cublas(cublasLtMatrixLayoutCreate(&d.c, out_type, n, m, n), "layout of out");
  const cublasLtMatmulAlgo_t algo = best_algorithm(context, d, "FP8 GEMM");
  const float alpha = 1.0f, beta = 0.0f;
  kernels::declare_launch_work(static_cast<double>(m * k + n * k) +
                                   static_cast<double>(m * n) * (g.out_dtype == kernels::KernelDType::F32 ? 4 : 2),
                               2.0 * static_cast<double>(m * n * k));
  const ProfiledRegion profiled("cublasLtMatmul (FP8)", stream);
  check_cublas(cublasLtMatmul(context.handle, d.op, &alpha, g.b, d.a, g.a, d.b, &beta, g.out, d.c, g.out, d.c, &algo,
                              context.workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream.handle)),
               "FP8 cublasLtMatmul");
#endif
}

void int8_s8_gemm_cublaslt(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a_s8,
                           const std::int8_t* b, std::int32_t* product, Stream stream) {
#if MT_SIM_BUILD
  (void)m, (void)n, (void)k, (void)a_s8, (void)b, (void)product, (void)stream;
  throw std::invalid_argument("int8_s8_gemm_cublaslt: the cuBLASLt back end needs a GPU build");
#else
  if (m == 0 || n == 0) return;
  if (k <= 0 || k % 4 != 0 || n % 4 != 0) {
    throw std::invalid_argument("int8_s8_gemm_cublaslt: cuBLASLt's INT8 GEMM takes k > 0, n and k multiples of 4");
  }
  CublasLtContext& context = cublaslt_context();
  LtDescriptors d;
  check_cublas(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32I, CUDA_R_32I), "INT8 matmul descriptor");
  set_tn_layout(d.op);  // the one layout cuBLASLt's INT8 kernels take in its regular data order
  const uint64_t rows = static_cast<uint64_t>(m), cols = static_cast<uint64_t>(n), depth = static_cast<uint64_t>(k);
  check_cublas(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8I, depth, cols, k), "layout of B");
  check_cublas(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8I, depth, rows, k), "layout of A");
  check_cublas(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32I, cols, rows, n), "layout of the product");
  const cublasLtMatmulAlgo_t algo = best_algorithm(context, d, "INT8 GEMM");
  const std::int32_t alpha = 1, beta = 0;
  kernels::declare_launch_work(static_cast<double>(m * k + n * k + 4 * m * n), 2.0 * static_cast<double>(m * n * k));
  const ProfiledRegion profiled("cublasLtMatmul (INT8)", stream);
  check_cublas(cublasLtMatmul(context.handle, d.op, &alpha, b, d.a, a_s8, d.b, &beta, product, d.c, product, d.c, &algo,
                              context.workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream.handle)),
               "INT8 cublasLtMatmul");
#endif
}

// The GEMM's work for the profile: 2mnk FLOPs, and A, B and C each moved once.
void declare_gemm_work(const GemmArgs& args) {
  const double bytes_per_element = args.dtype == KernelDType::F64 ? 8 : args.dtype == KernelDType::F32 ? 4 : 2;
  const double m = args.m, n = args.n, k = args.k, batch = args.batch;
  kernels::declare_launch_work(batch * (m * k + k * n + m * n) * bytes_per_element, 2.0 * batch * m * n * k);
}

#if !MT_SIM_BUILD
namespace {

kernels::GemmChooser& chooser() {
  static kernels::GemmChooser instance;
  return instance;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("gemm trial: ") + what + ": " + cudaGetErrorString(status));
}

// A trial's measure of one back end: a warm-up (module load, cuBLASLt's
// heuristic), then three timed calls; ms per call.
template <typename Run>
double time_calls(const Run& run, Stream stream) {
  constexpr int kTimed = 3;
  const auto handle = static_cast<cudaStream_t>(stream.handle);
  run();  // warm-up: module load, cuBLASLt's heuristic
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  check_cuda(cudaEventRecord(start, handle), "event record");
  for (int i = 0; i < kTimed; ++i) run();
  check_cuda(cudaEventRecord(stop, handle), "event record");
  float ms = 0;
  const cudaError_t waited = cudaEventSynchronize(stop);
  if (waited == cudaSuccess) check_cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed time");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  check_cuda(waited, "synchronize");
  return ms / kTimed;
}

double milliseconds_per_call(const GemmArgs& args, GemmBackend backend, Stream stream) {
  return time_calls([&] { backend == GemmBackend::Own ? gemm_own(args, stream) : gemm_cublaslt(args, stream); },
                    stream);
}

// C's m x n values (every batch) as doubles, read back to the host.
std::vector<double> read_output(const GemmArgs& args, Stream stream) {
  const KernelDType c_dtype = args.c_is_f32 ? KernelDType::F32 : args.dtype;
  const std::size_t size = c_dtype == KernelDType::F64 ? 8 : c_dtype == KernelDType::F32 ? 4 : 2;
  const std::size_t extent = static_cast<std::size_t>((args.batch - 1) * args.batch_stride_c +
                                                      static_cast<int64_t>(args.m - 1) * args.ldc + args.n);
  std::vector<unsigned char> bytes(extent * size);
  check_cuda(cudaMemcpyAsync(bytes.data(), args.c, bytes.size(), cudaMemcpyDeviceToHost,
                             static_cast<cudaStream_t>(stream.handle)),
             "copy C to the host");
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)), "synchronize");
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(args.batch) * args.m * args.n);
  for (int b = 0; b < args.batch; ++b) {
    for (int i = 0; i < args.m; ++i) {
      for (int j = 0; j < args.n; ++j) {
        const std::size_t at =
            static_cast<std::size_t>(b * args.batch_stride_c + static_cast<int64_t>(i) * args.ldc + j);
        const unsigned char* p = bytes.data() + at * size;
        std::uint16_t bits = 0;
        if (size == 2) std::memcpy(&bits, p, 2);
        switch (c_dtype) {
          case KernelDType::F16: values.push_back(f16_bits_to_f32(bits)); break;
          case KernelDType::BF16: values.push_back(bf16_bits_to_f32(bits)); break;
          case KernelDType::F32: {
            float v;
            std::memcpy(&v, p, 4);
            values.push_back(v);
            break;
          }
          case KernelDType::F64: {
            double v;
            std::memcpy(&v, p, 8);
            values.push_back(v);
            break;
          }
        }
      }
    }
  }
  return values;
}

// Same result up to accumulation order and the final rounding: every
// difference within a few units of the output's last place at the output's scale.
bool outputs_agree(const std::vector<double>& own, const std::vector<double>& reference, KernelDType dtype) {
  double scale = 0;
  for (double v : reference) scale = std::max(scale, std::abs(v));
  const double ulp = dtype == KernelDType::BF16  ? 1.0 / 128
                     : dtype == KernelDType::F16 ? 1.0 / 1024
                     : dtype == KernelDType::F32 ? 1e-5
                                                 : 1e-14;  // f32: long sums in another order
  const double tolerance = 8 * ulp * std::max(scale, 1e-30);
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (!(std::abs(own[i] - reference[i]) <= tolerance)) return false;
  }
  return true;
}

GemmBackend choose_by_trial(const GemmArgs& args, Stream stream) {
  const kernels::GemmShape shape{args.dtype,   args.batch,   args.m,       args.n,
                                 args.k,       args.trans_a, args.trans_b, gemm_hopper_supports(args),
                                 /*fp8=*/false};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream.handle), &capture), "capture status");
  if (capture != cudaStreamCaptureStatusNone) {
    const auto known = chooser().find(shape);
    return known ? known->winner : GemmBackend::CublasLt;
  }
  std::vector<double> own_output;
  bool own_failed = false;
  return chooser().choose(
      shape,
      [&](GemmBackend backend) {
        if (backend == GemmBackend::CublasLt) return milliseconds_per_call(args, backend, stream);
        try {  // an own kernel that cannot run here (a launch it refuses) loses, it does not stop training
          const double ms = milliseconds_per_call(args, backend, stream);
          own_output = read_output(args, stream);
          return ms;
        } catch (const std::exception&) {
          own_failed = true;
          return std::numeric_limits<double>::infinity();
        }
      },
      // cuBLASLt ran last, so C now holds its result, whatever the verdict.
      [&] {
        return !own_failed &&
               outputs_agree(own_output, read_output(args, stream), args.c_is_f32 ? KernelDType::F32 : args.dtype);
      });
}

// The FP8 GEMM's trial: v10 against cuBLASLt's FP8 GEMM (per-tensor scales),
// the same rules as choose_by_trial's (a shape first met in a capture takes
// cuBLASLt; v10 wins only if it agrees with cuBLASLt and is faster).
GemmBackend choose_fp8_by_trial(const kernels::Fp8Gemm& g, Stream stream) {
  const kernels::GemmShape shape{g.out_dtype, 1, g.m, g.n, g.k, g.a_e5m2, false, true, /*fp8=*/true};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream.handle), &capture), "capture status");
  if (capture != cudaStreamCaptureStatusNone) {
    const auto known = chooser().find(shape);
    return known ? known->winner : GemmBackend::CublasLt;
  }
  GemmArgs out;  // the output as read_output reads it
  out.dtype = g.out_dtype, out.m = g.m, out.n = g.n, out.c = g.out, out.ldc = g.n;
  std::vector<double> own_output;
  bool own_failed = false;
  return chooser().choose(
      shape,
      [&](GemmBackend backend) {
        if (backend == GemmBackend::CublasLt) {
          return time_calls([&] { fp8_gemm_cublaslt(g, nullptr, stream); }, stream);
        }
        try {
          const double ms = time_calls([&] { fp8_gemm_v10_wgmma(g, stream); }, stream);
          own_output = read_output(out, stream);
          return ms;
        } catch (const std::exception&) {
          own_failed = true;
          return std::numeric_limits<double>::infinity();
        }
      },
      [&] { return !own_failed && outputs_agree(own_output, read_output(out, stream), g.out_dtype); });
}

}  // namespace
#endif

void fp8_gemm(const kernels::Fp8Gemm& g, GemmBackend backend, Stream stream) {
  GemmBackend chosen = resolve(backend);
  if (g.block_scales || chosen == GemmBackend::Reference) chosen = GemmBackend::Own;  // cuBLASLt here: per tensor only
#if !MT_SIM_BUILD
  if (chosen == GemmBackend::Auto) {
    const bool worth_a_trial = g.m > 0 && g.n > 0 && g.k > 0;
    chosen = worth_a_trial ? choose_fp8_by_trial(g, stream) : GemmBackend::Own;
  }
#endif
  if (chosen == GemmBackend::CublasLt) {
    fp8_gemm_cublaslt(g, nullptr, stream);
  } else {
    fp8_gemm_v10_wgmma(g, stream);
  }
}

void gemm(const GemmArgs& args, GemmBackend backend, Stream stream) {
  gemm_detail::check_args(args, "gemm");
  GemmBackend chosen = resolve(backend);
#if !MT_SIM_BUILD
  const bool worth_a_trial = args.m > 0 && args.n > 0 && args.k > 0 && args.batch > 0;
  if (chosen == GemmBackend::Auto) chosen = worth_a_trial ? choose_by_trial(args, stream) : GemmBackend::CublasLt;
#endif
  declare_gemm_work(args);
  if (chosen == GemmBackend::Reference) {
    gemm_v1_naive(args, stream);
  } else if (chosen == GemmBackend::CublasLt) {
    gemm_cublaslt(args, stream);
  } else {
    gemm_own(args, stream);
  }
}

const char* gemm_backend_name(GemmBackend backend) {
  switch (resolve(backend)) {
    case GemmBackend::CublasLt: return "cublaslt";
    case GemmBackend::Own: return "own";
    case GemmBackend::Auto: return "auto (measured per shape)";
    case GemmBackend::Reference: return "reference (ladder v1)";
  }
  return "?";
}

}  // namespace mt::MT_KERNEL_NS
