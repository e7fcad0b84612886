// The fp8 family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/fp8/fp8.h) calls it. Tensors are contiguous and on the host;
// amax, scale and scale_inv are f32.
#pragma once

#include "core/tensor.h"
#include "kernels/fp8/api.h"

namespace mt::kernels::cpu {

// amax = max(amax, max |x|).
void fp8_amax(const Tensor& x, const Tensor& amax);
void fp8_delayed_update(const Tensor& history, bool most_recent, Fp8ScaleRule rule, const Tensor& scale,
                        const Tensor& scale_inv);
// out = fp8(x * scale); amax (optional) = max(amax, max |x|).
void fp8_quantize_with_scale(const Tensor& x, const Tensor& scale, const Tensor& out, const Tensor& out_t,
                             const Tensor& amax);
void fp8_scale_from_amax(const Tensor& amax, Fp8ScaleRule rule, const Tensor& scale, const Tensor& scale_inv);
void fp8_quantize_grouped(const Tensor& x, Fp8Groups groups, Fp8ScaleRule rule, const Tensor& out,
                          const Tensor& scale_inv);
void fp8_count_saturated_and_flushed(const Tensor& q, const Tensor& x, const Tensor& scale_inv, Fp8Groups groups,
                                     const Tensor& counts);
void fp8_dequantize(const Tensor& q, const Tensor& scale_inv, Fp8Groups groups, const Tensor& out);

// product: f32 [k_groups, M, N]; bias: f32 [N] or undefined; out: [M, N].
void fp8_gemm_combine(const Tensor& product, int64_t k_group, const Tensor& a_scale_inv, Fp8Groups a_groups,
                      const Tensor& b_scale_inv, Fp8Groups b_groups, const Tensor& bias, const Tensor& out);

}  // namespace mt::kernels::cpu
