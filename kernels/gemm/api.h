// The GEMM ladder's host entry points (plain C++: op code, tests and the
// benchmark include this without any CUDA header).
//
//   Z[b] = op(A[b]) @ op(B[b])  (+ bias[n] on every row)
//   C[b] = act(Z[b])            (act: none, ReLU, GELU erf or tanh form)
//
// for b < batch, where op(A) is M x K and op(B) is K x N. Every matrix is
// row-major with a leading dimension; `trans_a` means A is stored as its
// transpose (K x M, element (i, k) at a[k * lda + i]), likewise `trans_b`
// (B stored N x K). So NN, NT, TN (and TT) all read their operands in place.
// F16/BF16 operands are std::uint16_t bit patterns; C and bias have the same
// dtype as A and B. Products accumulate in f32 (f64 for f64) and C is rounded
// once. When `pre_activation` is set, Z is stored there too (same layout as
// C): GELU's backward reads it, so a Linear + GELU layer keeps Z, as the
// unfused pair would, but writes it in the same pass. Each version lives in its own file in ladder/:
//
//   v1_naive.cu               one thread per output, operands from global memory
//   v2_shared_tiles.cu        16x16 tiles staged through shared memory
//   v3_register_blocking.cu   64x64 block tile, 4x4 outputs per thread
//   v4_tensor_core.cu         ldmatrix + mma.sync m16n8k16 (f16/bf16 only)
//   v5_pipelined.cu           v4 + a 3-stage cp.async shared-memory pipeline
//   v6_tma_wgmma.cu           Hopper: TMA tile loads on mbarriers + wgmma from shared memory
//   v7_warp_specialized.cu    v6 + a producer warpgroup, two consumer warpgroups, persistent grid
//   v8_clusters.cu            v7 in 2-block clusters sharing B by TMA multicast
//   v9_int8_mma.cu            INT8 (u8 x s8 -> s32) on mma.sync m16n8k32 (Int8Gemm)
//   v10_fp8_wgmma.cu          FP8 on wgmma k32, per-tensor or block scales, promoted every 128 of K (Fp8Gemm)
//
// v1-v3 accept every dtype (f64, f32, f16, bf16); v4-v8 only f16/bf16; v6-v8
// also need operands TMA can read and, on a GPU, sm_90 (gemm_hopper_supports).
// kernels/gemm/cuda.cu picks one per problem (gemm()).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/common/kernel_dtype.h"
#include "runtime/kernel_api.h"

namespace mt::kernels {

// The activation applied to each product in the epilogue, in the accumulator
// type, before the one rounding into C. The formulas are those of the
// elementwise ops (kernels/elementwise/math.h), so a fused layer computes
// exactly what the separate op would from an unrounded input.
enum class GemmActivation : uint8_t { None, Relu, GeluErf, GeluTanh };

struct GemmArgs {
  KernelDType dtype = KernelDType::F32;
  int batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  bool trans_b = false;
  void* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  const void* bias = nullptr;  // [n], dtype of C; null for none
  GemmActivation activation = GemmActivation::None;
  void* pre_activation = nullptr;  // Z (bias added, no activation), laid out as C; null for none
  bool allow_tf32 = false;         // f32 only; honoured by the cuBLASLt back end (own kernels stay true FP32)
  // C stored as f32 whatever the operand dtype: partial sums that a later
  // pass adds up and rounds once (split-K). f16/bf16/f32 operands only, and
  // no bias, activation or pre-activation.
  bool c_is_f32 = false;
};

// An INT8 GEMM for quantized inference (post-training static quantization:
// asymmetric u8 activations with one scale and zero point, symmetric s8
// weights with a scale per output channel):
//   out[m, n] = act(scales[n] * sum_k (a[m, k] - a_zero_point) * b[n, k] + bias[n])
// with the sum in s32 (exact), then f32: scales[n] is the activations' scale
// times channel n's weight scale; bias and the activation as GemmEpilogue's,
// on the f32 value, rounded once into out (f32 or bf16, contiguous [m, n]).
// On the CPU out may be u8: the f32 value requantized for the next INT8
// layer, quantize_value(v, out_scale, out_zero_point, 0, 255)
// (kernels/quantize/math.h), so no f32 activation is written between them.
// The same arguments on the CPU (cpu::int8_gemm, host pointers) and the
// CUDA path (int8_gemm_v9_mma or int8_gemm_vendor, device pointers; f32 or
// bf16 out only).
struct Int8Gemm {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // [m, k] row-major
  int32_t a_zero_point = 0;
  const int8_t* b = nullptr;      // [n, k] row-major (a Linear's weight)
  const float* scales = nullptr;  // [n]
  const float* bias = nullptr;    // [n] or null
  GemmActivation activation = GemmActivation::None;
  float out_scale = 0;         // a u8 out's scale (finite, > 0)
  int32_t out_zero_point = 0;  // and zero point, in [0, 255]
};

// The INT8 GEMM through a vendor s8 x s8 -> s32 GEMM (int8_vendor.cu):
// cuBLASLt's INT8 kernels on a GPU, a plain s32 loop standing in for them on
// the simulator. The same formula and the same f32 rounding as v9, so its
// out equals v9's bit for bit. Its three scratch buffers, on the device:
// a_s8 [m, k], weight_sums [n], product [m, n].
struct Int8VendorScratch {
  int8_t* a_s8 = nullptr;
  int32_t* weight_sums = nullptr;
  int32_t* product = nullptr;
};

// What cuBLASLt's INT8 GEMM takes in the layout used here ("TN", its
// regular data order): k > 0, n and k multiples of 4 (its m, k and leading
// dimensions), the weight 4-byte aligned (a_s8 and product are scratch).
inline bool int8_vendor_takes(const Int8Gemm& g) {
  return g.k > 0 && g.k % 4 == 0 && g.n % 4 == 0 && reinterpret_cast<uintptr_t>(g.b) % 4 == 0;
}

// An FP8 GEMM with scales (ladder/v10_fp8_wgmma.cu), the formula of the FP8
// recipes' reference (kernels/fp8: a product per K group, then
// fp8_gemm_combine), over K blocks g of 128:
//   out[m, n] = act(sum_g (sum_{k in g} A[m, k] B[n, k]) * a_scale_inv(m, g) * b_scale_inv(n, g) + bias[n])
// A [m, k] and B [n, k] (a Linear's weight as stored) are FP8 row-major:
// both K-major, the one layout FP8 wgmma reads; A E4M3 or E5M2 (a
// gradient), B E4M3 (b_e5m2 is refused: no recipe multiplies by it). Scales
// are f32 on the device: one each (per tensor), or DeepSeek-V3's blocks: A
// per 1 x 128 tile, [m, ceil(k / 128)], B per 128 x 128 block,
// [ceil(n / 128), ceil(k / 128)], both row-major. out is f32 or bf16,
// contiguous [m, n]; bias (or null) has out's dtype. k % 16 == 0 and 16-byte
// aligned operands (TMA's rules).
struct Fp8Gemm {
  int m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;
  bool a_e5m2 = false;
  const uint8_t* b = nullptr;
  bool b_e5m2 = false;
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  bool block_scales = false;
  KernelDType out_dtype = KernelDType::BF16;
  void* out = nullptr;
  const void* bias = nullptr;
  GemmActivation activation = GemmActivation::None;
  // Partial sums leave the Tensor Core for f32 registers every 128 of K,
  // scaled there (DeepSeek-V3's promotion). false keeps the whole K in the
  // Tensor Core's accumulator and scales once (per-tensor scales only): the
  // variant that loses accuracy where the hardware accumulates narrowly.
  bool promote = true;
};

// Which implementation gemm() uses. Auto: MT_GEMM from the environment
// (auto|own|cublaslt); auto (or unset) means the own kernels in the simulator
// and, on a GPU, the faster of the two per shape, measured once
// (kernels/gemm/cuda.cu, gemm_choice.h). CublasLt exists only in the GPU build.
// Reference is the v1 rung: what the dispatcher asks for on `sim` treated as
// a GPU (MT_SIM_GPU_IDENTITY) where the own rung has not passed its check,
// standing in for cuBLASLt, which the simulator does not have
// (kernels/verify/trust.h).
enum class GemmBackend : int { Auto, Own, CublasLt, Reference };

// MT_GEMM as the user set it: auto (or unset), own or cublaslt (the one
// reading of it: the float, FP8 and INT8 dispatchers and gemm() itself).
// Anything else is an error.
inline GemmBackend gemm_backend_from_environment() {
  const char* value = std::getenv("MT_GEMM");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return GemmBackend::Auto;
  if (std::strcmp(value, "own") == 0) return GemmBackend::Own;
  if (std::strcmp(value, "cublaslt") == 0) return GemmBackend::CublasLt;
  throw std::invalid_argument(std::string("MT_GEMM='") + value + "': expected auto, own or cublaslt");
}

}  // namespace mt::kernels

MT_CUDA_KERNEL_API(void gemm_v1_naive(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v2_shared_tiles(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v3_register_blocking(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v4_tensor_core(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v5_pipelined(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v6_tma_wgmma(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v7_warp_specialized(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
MT_CUDA_KERNEL_API(void gemm_v8_clusters(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
// The INT8 rung (ladder/v9_int8_mma.cu): out = Int8Gemm's formula, out
// f32 or bf16 (out_bf16) contiguous [m, n]; every pointer on the device.
MT_CUDA_KERNEL_API(void int8_gemm_v9_mma(const mt::kernels::Int8Gemm& gemm, void* out, bool out_bf16,
                                         mt::kernels::Stream stream))
// The INT8 GEMM by the vendor path (Int8VendorScratch above); throws
// std::invalid_argument where int8_vendor_takes(gemm) is false.
MT_CUDA_KERNEL_API(void int8_gemm_vendor(const mt::kernels::Int8Gemm& gemm,
                                         const mt::kernels::Int8VendorScratch& scratch, void* out, bool out_bf16,
                                         mt::kernels::Stream stream))
// Its middle step on a GPU: product [m, n] (s32) = a_s8 [m, k] x b [n, k]^T
// by cuBLASLt (CUBLAS_COMPUTE_32I); throws in the simulator build.
MT_CUDA_KERNEL_API(void int8_s8_gemm_cublaslt(int64_t m, int64_t n, int64_t k, const int8_t* a_s8, const int8_t* b,
                                              int32_t* product, mt::kernels::Stream stream))
// The FP8 rung (ladder/v10_fp8_wgmma.cu): Fp8Gemm's formula. fp8_gemm (below)
// runs it for the FP8 Linear's GEMMs on sim and CUDA. Throws
// std::invalid_argument for what it cannot take.
MT_CUDA_KERNEL_API(void fp8_gemm_v10_wgmma(const mt::kernels::Fp8Gemm& gemm, mt::kernels::Stream stream))
// The same product by cuBLASLt's FP8 GEMM (GPU build; the simulator build
// throws): per-tensor scales only (A/B_SCALE_POINTER), the "TN" layout
// cuBLASLt's FP8 kernels require (exactly A [m, k] and B [n, k] row-major),
// fast accumulation only when !promote, and, when `amax_d` is not null, the
// largest |out| written there by the same call (feeds delayed scaling
// without another pass). Never run on a GPU yet.
MT_CUDA_KERNEL_API(void fp8_gemm_cublaslt(const mt::kernels::Fp8Gemm& gemm, float* amax_d, mt::kernels::Stream stream))
// The production FP8 entry: v10, or cuBLASLt's FP8 GEMM (per-tensor scales
// only): an explicit back end wins; Auto reads MT_GEMM, and on a GPU
// auto means a measured trial per shape like gemm()'s. The simulator runs v10.
MT_CUDA_KERNEL_API(void fp8_gemm(const mt::kernels::Fp8Gemm& gemm, mt::kernels::GemmBackend backend,
                                 mt::kernels::Stream stream))
// True when the Hopper rungs (v6-v8) can run `args` here: f16/bf16, 16-byte
// aligned operands with leading dimensions and batch strides multiples of 8,
// and (GPU) an sm_90 device.
MT_CUDA_KERNEL_API(bool gemm_hopper_supports(const mt::kernels::GemmArgs& args))
// Production entry (kernels/gemm/cuda.cu): the best own kernel for the
// dtype (v5 for f16/bf16, v3 for f32, v2 for f64) or cuBLASLt.
MT_CUDA_KERNEL_API(void gemm(const mt::kernels::GemmArgs& args, mt::kernels::GemmBackend backend,
                             mt::kernels::Stream stream))
// Name of the back end gemm() would use for `backend` ("own" or "cublaslt").
MT_CUDA_KERNEL_API(const char* gemm_backend_name(mt::kernels::GemmBackend backend))
// cuBLASLt directly (throws in the simulator build); for the benchmark.
MT_CUDA_KERNEL_API(void gemm_cublaslt(const mt::kernels::GemmArgs& args, mt::kernels::Stream stream))
