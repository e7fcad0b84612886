// The CPU's INT8 GEMM (kernels/gemm/cpu.h): u8 activations x s8 weights,
// s32 accumulation, scaled to f32, bias and activation, one rounding into
// out. The building block of quantized Linear layers.
//
// oneDNN runs it where the CPU's INT8 products are native (VNNI's
// vpdpbusd, AMX tiles): four u8 x s8 products into an s32 lane per
// instruction. Elsewhere, and for shapes oneDNN declines, an s32 loop
// computes the same sums: both are exact (an s32 sum of K products of at
// most 255 x 128 overflows only past K = 65,000), so the two paths differ
// at most in the rounding of the s32 -> f32 conversion and the scaling,
// which both do once.
//
// Speed (2-core AMD EPYC with AVX512-VNNI, 2 threads, M=2048 K=768 N=3072,
// side by side in one run, twice): 783-794 GOP/s, against 430-432 GFLOP/s
// for a bf16 mt::linear of the same shape and 213-214 for f32.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/gemm/cpu.h"
#include "kernels/gemm/epilogue.h"
#include "kernels/gemm/onednn.h"
#include "kernels/quantize/cpu.h"

namespace mt::kernels::cpu {
namespace {

// product[m, n] = scales[n] * sum_k (a[m, k] - a_zero_point) * b[n, k], the
// sum in s32, rows split across threads.
void int8_gemm_loop(const Int8Gemm& g, float* product) {
  parallel_for(g.m, g.n * g.k, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> row(static_cast<size_t>(g.k));
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t c = 0; c < g.k; ++c) row[static_cast<size_t>(c)] = int32_t{g.a[i * g.k + c]} - g.a_zero_point;
      for (int64_t j = 0; j < g.n; ++j) {
        const int8_t* w = g.b + j * g.k;
        int32_t sum = 0;
        for (int64_t c = 0; c < g.k; ++c) sum += row[static_cast<size_t>(c)] * int32_t{w[c]};
        product[i * g.n + j] = static_cast<float>(sum) * g.scales[j];
      }
    }
  });
}

}  // namespace

void check_int8_gemm(const Int8Gemm& g, const Tensor& out) {
  MT_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && (g.m * g.k == 0 || g.a != nullptr) &&
               (g.n * g.k == 0 || g.b != nullptr) && (g.n == 0 || g.scales != nullptr),
           "int8_gemm: [{}, {}] x [{}, {}] needs its operands and a scale per output column", g.m, g.k, g.n, g.k);
  MT_CHECK(out.dim() == 2 && out.size(0) == g.m && out.size(1) == g.n && out.is_contiguous() &&
               (out.dtype() == kF32 || out.dtype() == kBF16 || out.dtype() == kU8),
           "int8_gemm: out must be a contiguous f32, bf16 or u8 [{}, {}], got {} {}", g.m, g.n, out.dtype(),
           out.shape_string());
  MT_CHECK(g.a_zero_point >= 0 && g.a_zero_point <= 255, "int8_gemm: a u8 zero point is in [0, 255], got {}",
           g.a_zero_point);
  if (out.dtype() == kU8) check_requantization(g.out_scale, g.out_zero_point, "int8_gemm");
}

void check_requantization(float scale, int32_t zero_point, const char* what) {
  MT_CHECK(std::isfinite(scale) && scale > 0 && zero_point >= 0 && zero_point <= 255,
           "{}: a u8 output needs a finite positive scale and a zero point in [0, 255], got {} and {}", what, scale,
           zero_point);
}

void int8_gemm(const Int8Gemm& g, const Tensor& out) {
  check_int8_gemm(g, out);
  Int8Output product(out, g.out_scale, g.out_zero_point);
  float* c = product.values();
  if (g.k == 0) {
    std::fill(c, c + g.m * g.n, 0.0f);
  } else if (!onednn_int8_gemm(g, c)) {
    int8_gemm_loop(g, c);
  }
  if (g.bias != nullptr || g.activation != GemmActivation::None || product.requantizes()) {
    parallel_for(g.m, g.n, [&](int64_t begin, int64_t end) {
      apply_epilogue(c, static_cast<float*>(nullptr), g.n, begin, end - begin, 0, g.n, g.bias, g.activation);
      product.finish(begin * g.n, (end - begin) * g.n);
    });
  }
  product.commit();
}

}  // namespace mt::kernels::cpu
