// The FP8 GEMM on sim and CUDA tensors through the FP8 Tensor Core rung
// (ladder/v10_fp8_wgmma.cu): FP8 bytes multiplied as they are, partial sums
// promoted to f32 every 128 of K with their scales (kernels/gemm/api.h,
// Fp8Gemm). The FP8 recipes (autograd/fp8.cpp) call it where it applies and
// otherwise widen the operands for a bf16/f32 GEMM per K block and combine.
//
// On a GPU v10 runs only where it has passed its check there
// (kernels/verify/trust.h, family gemm.v10); elsewhere cuBLASLt's FP8 GEMM
// (per-tensor scales) or the widened path serves, with one warning.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

// Which back end serves an FP8 product of these tensors on sim or CUDA, or
// nullopt for the widened path. The FP8 GEMM takes per-tensor scales on both,
// or A in 1 x 128 tiles with B in 128 x 128 blocks; A E4M3 or E5M2, B E4M3;
// f32 or bf16 out; k a multiple of 16 and 16-byte aligned operands (TMA).
// Auto (v10, and on a GPU a measured trial against cuBLASLt's FP8 GEMM)
// where v10 is verified; else cuBLASLt's alone where it applies (per-tensor
// scales on a GPU); MT_GEMM=own|cublaslt is the user's explicit choice.
inline std::optional<GemmBackend> fp8_gemm_backend(const Tensor& a, const Tensor& b, bool per_tensor,
                                                   bool tiles_by_blocks, DType out_dtype) {
  if (a.device().is_cpu() || !(per_tensor || tiles_by_blocks)) return std::nullopt;
  if (b.dtype() != kF8E4M3 || (out_dtype != kF32 && out_dtype != kBF16)) return std::nullopt;
  if (a.size(1) % 16 != 0 || a.size(1) == 0 || !a.is_contiguous() || !b.is_contiguous()) return std::nullopt;
  if (reinterpret_cast<std::uintptr_t>(a.data_ptr()) % 16 != 0 || reinterpret_cast<std::uintptr_t>(b.data_ptr()) % 16)
    return std::nullopt;
  if (gemm_backend_from_environment() != GemmBackend::Auto) return GemmBackend::Auto;  // fp8_gemm honours it
  if (verify::own_family_trusted(verify::OwnFamily::GemmV10Fp8, a.device())) return GemmBackend::Auto;
  verify::warn_untrusted(verify::OwnFamily::GemmV10Fp8, a.device());
  if (a.device().is_cuda() && per_tensor) return GemmBackend::CublasLt;
  return std::nullopt;
}

// out [m, n] (contiguous, f32 or bf16) = the scaled FP8 product (+ bias, in
// out's dtype, contiguous, or undefined), by the back end fp8_gemm_backend chose.
inline void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                     bool block_scales, const Tensor& bias, GemmBackend backend, const Tensor& out) {
  Fp8Gemm g;
  g.m = static_cast<int>(a.size(0)), g.n = static_cast<int>(b.size(0)), g.k = static_cast<int>(a.size(1));
  g.a = static_cast<const uint8_t*>(a.data_ptr()), g.a_e5m2 = a.dtype() == kF8E5M2;
  g.b = static_cast<const uint8_t*>(b.data_ptr());
  g.a_scale_inv = static_cast<const float*>(a_scale_inv.data_ptr());
  g.b_scale_inv = static_cast<const float*>(b_scale_inv.data_ptr());
  g.block_scales = block_scales;
  g.out_dtype = out.dtype() == kBF16 ? KernelDType::BF16 : KernelDType::F32;
  g.out = out.data_ptr();
  g.bias = bias.defined() ? bias.data_ptr() : nullptr;
  MT_DEVICE_CALL(backend_for(out.device(), "fp8_gemm"), fp8_gemm, g, backend, launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
