// The fp8 family's CUDA/sim entry points (cuda.cu) and the plain types they
// share with the CPU back end (cpu.cpp): quantizing a tensor into FP8 with
// FP32 scales, dequantizing it, and the amax and scale kernels of the
// per-tensor recipes. Every tensor is contiguous; scales and amax are f32
// device values that only kernels read, so an FP8 step needs no host sync.
#pragma once

#include <cstdint>

#include "runtime/kernel_api.h"
#include "runtime/macros.h"
#include "kernels/common/tensor_ref.h"

namespace mt::kernels {

// A tensor seen as rows x cols (cols = its last dim, rows = everything
// before), cut into groups of group_rows x group_cols that each share one
// scale; groups at the right and bottom edges may be ragged. Per tensor is one
// group of rows x cols; per row, 1 x cols; DeepSeek-V3's tiles, 1 x 128;
// its weight blocks, 128 x 128. scale_inv[gr * group_columns() + gc] belongs
// to group (gr, gc).
struct Fp8Groups {
  std::int64_t rows = 0, cols = 0;
  std::int64_t group_rows = 1, group_cols = 1;
  MT_HOST_DEVICE std::int64_t group_row_count() const { return group_rows == 0 ? 0 : (rows + group_rows - 1) / group_rows; }
  MT_HOST_DEVICE std::int64_t group_columns() const { return group_cols == 0 ? 0 : (cols + group_cols - 1) / group_cols; }
  MT_HOST_DEVICE std::int64_t count() const { return group_row_count() * group_columns(); }
};

// How a recipe turns an amax into a scale (kernels/fp8/math.h).
struct Fp8ScaleRule {
  float format_max = 448.0f;  // the format's largest finite value
  float margin_factor = 1.0f;  // 2^-margin (Transformer Engine's margin)
};

}  // namespace mt::kernels

// amax = max |x| over x (NaN if x holds one). amax must hold 0 beforehand.
MT_CUDA_KERNEL_API(void fp8_amax(const mt::kernels::TensorRef& x, float* amax, mt::kernels::Stream stream))
// Delayed scaling's step (kernels/fp8/math.h, fp8_delayed_step): amax from the
// history, the new scale and scale_inv, then the history's roll. One thread.
MT_CUDA_KERNEL_API(void fp8_delayed_update(float* history, std::int64_t length, bool most_recent,
                                           mt::kernels::Fp8ScaleRule rule, float* scale, float* scale_inv,
                                           mt::kernels::Stream stream))
// out = fp8(x * *scale) with the format of out's dtype; when amax is not null it
// also folds max |x| of this pass into it (a running max). When out_t.data is
// not null (x 2-D [R, C]) the same pass also writes out_t = out's transpose
// [C, R] (32 x 32 tiles through shared memory): the operand the weight
// gradient reads, with no second pass over x and no copy of out.
MT_CUDA_KERNEL_API(void fp8_quantize_with_scale(const mt::kernels::TensorRef& x, const float* scale,
                                                const mt::kernels::TensorRef& out, const mt::kernels::TensorRef& out_t,
                                                float* amax, mt::kernels::Stream stream))
// Current scaling's per-tensor step: scale = rule(*amax), scale_inv = 1 / scale
// (kernels/fp8/math.h, fp8_current_scale). One thread.
MT_CUDA_KERNEL_API(void fp8_scale_from_amax(const float* amax, mt::kernels::Fp8ScaleRule rule, float* scale,
                                            float* scale_inv, mt::kernels::Stream stream))
// Per group: its amax, scale = rule(amax), out = fp8(x * scale), scale_inv[group] = 1 / scale.
MT_CUDA_KERNEL_API(void fp8_quantize_grouped(const mt::kernels::TensorRef& x, mt::kernels::Fp8Groups groups,
                                             mt::kernels::Fp8ScaleRule rule, const mt::kernels::TensorRef& out,
                                             float* scale_inv, mt::kernels::Stream stream))
// Where FP8 hurts, counted: counts[0] += the elements of x beyond the
// format's largest finite value once scaled (|x| > max * scale_inv of its
// group: saturated), counts[1] += those that were not 0 and became +-0 in q
// (flushed). counts: two f32, exact up to 2^24 counted elements.
MT_CUDA_KERNEL_API(void fp8_count_saturated_and_flushed(const mt::kernels::TensorRef& q, const mt::kernels::TensorRef& x,
                                                        const float* scale_inv, mt::kernels::Fp8Groups groups,
                                                        float* counts, mt::kernels::Stream stream))
// out = value(q) * scale_inv[group of the element], rounded once into out's dtype.
MT_CUDA_KERNEL_API(void fp8_dequantize(const mt::kernels::TensorRef& q, const float* scale_inv,
                                       mt::kernels::Fp8Groups groups, const mt::kernels::TensorRef& out,
                                       mt::kernels::Stream stream))
// The FP8 GEMM's last step: out[m, n] = sum over K groups g of
// product[g, m, n] * a_scale_inv[group of (m, g * k_group)] * b_scale_inv[group of (n, g * k_group)]
// (+ bias[n]), in f32, rounded once into out's dtype. product is f32
// [k_groups, M, N] (one partial product per K group: FP32 promotion every
// k_group elements of K); k_groups == 1 for per-tensor and per-row scales.
MT_CUDA_KERNEL_API(void fp8_gemm_combine(const float* product, std::int64_t k_groups, std::int64_t k_group,
                                         const float* a_scale_inv, mt::kernels::Fp8Groups a_groups,
                                         const float* b_scale_inv, mt::kernels::Fp8Groups b_groups,
                                         const float* bias, const mt::kernels::TensorRef& out,
                                         mt::kernels::Stream stream))
