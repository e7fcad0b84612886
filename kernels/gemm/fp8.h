// The FP8 GEMM on sim and CUDA tensors through the FP8 Tensor Core rung
// (ladder/v10_fp8_wgmma.cu): FP8 bytes multiplied as they are, partial sums
// promoted to f32 every 128 of K with their scales (kernels/gemm/api.h,
// Fp8Gemm). The FP8 recipes (autograd/fp8.cpp) call it where it applies and
// otherwise widen the operands for a bf16/f32 GEMM per K block and combine.
//
// On a GPU it runs only where it has passed its check there
// (kernels/verify/trust.h, family gemm.v10); elsewhere the widened path
// serves, with one warning.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

// Can the rung take a [m, k] x [n, k] product of these FP8 tensors into
// `out_dtype`? Per-tensor scales on both, or A in 1 x 128 tiles with B in
// 128 x 128 blocks; A E4M3 or E5M2, B E4M3; f32 or bf16 out; k a multiple of
// 16 and both operands 16-byte aligned (TMA); sim, or a GPU where it is
// verified.
inline bool fp8_rung_applies(const Tensor& a, const Tensor& b, bool per_tensor, bool tiles_by_blocks, DType out_dtype) {
  if (a.device().is_cpu() || !(per_tensor || tiles_by_blocks)) return false;
  if (b.dtype() != kF8E4M3 || (out_dtype != kF32 && out_dtype != kBF16)) return false;
  if (a.size(1) % 16 != 0 || a.size(1) == 0 || !a.is_contiguous() || !b.is_contiguous()) return false;
  if (reinterpret_cast<std::uintptr_t>(a.data_ptr()) % 16 != 0 || reinterpret_cast<std::uintptr_t>(b.data_ptr()) % 16)
    return false;
  if (!verify::own_family_trusted(verify::OwnFamily::GemmV10Fp8, a.device())) {
    verify::warn_untrusted(verify::OwnFamily::GemmV10Fp8, a.device());
    return false;
  }
  return true;
}

// out [m, n] (contiguous, f32 or bf16) = the scaled FP8 product (+ bias, in
// out's dtype, contiguous, or undefined); the caller checked fp8_rung_applies.
inline void fp8_gemm_rung(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                          bool block_scales, const Tensor& bias, const Tensor& out) {
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
  MT_DEVICE_CALL(backend_for(out.device(), "fp8_gemm"), fp8_gemm_v10_wgmma, g, launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
