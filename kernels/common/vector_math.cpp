#include "kernels/common/vector_math.h"

#include <cmath>
#include <vector>

#if MT_WITH_SLEEF
#include <immintrin.h>
#include <sleef.h>
#endif

namespace mt::kernels::cpu {
namespace {

#if MT_WITH_SLEEF
// Applies an 8-wide SLEEF function over n floats; the last partial vector
// goes through a zero-padded copy (the padding's results are dropped).
template <typename Vector8>
void apply8(Vector8 f, const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
  if (i == n) return;
  float tail[8] = {};
  for (int64_t j = i; j < n; ++j) tail[j - i] = in[j];
  _mm256_storeu_ps(tail, f(_mm256_loadu_ps(tail)));
  for (int64_t j = i; j < n; ++j) out[j] = tail[j - i];
}

// Numerical Recipes' erfcc, eight values at a time: erfc(|x|) =
// t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2); erfc(x) = 2 - erfc(|x|) below 0.
__m256 erfc8_16bit(__m256 x) {
  const __m256 z = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f)));
  static constexpr float kP[] = {0.17087277f,  -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                 -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 10; ++i) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kP[i]));
  const __m256 r = _mm256_mul_ps(t, Sleef_expf8_u10(_mm256_fnmadd_ps(z, z, p)));
  return _mm256_blendv_ps(r, _mm256_sub_ps(_mm256_set1_ps(2.0f), r), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}
#endif

}  // namespace

void exp_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_expf8_u10, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
#endif
}

void log_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_logf8_u10, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::log(in[i]);
#endif
}

void tanh_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_tanhf8_u10, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
#endif
}

void erfc_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_erfcf8_u15, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::erfc(in[i]);
#endif
}

void erfc_16bit_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(erfc8_16bit, in, out, n);
#else
  erfc_n(in, out, n);
#endif
}

bool sleef_built() { return MT_WITH_SLEEF != 0; }

float* thread_f32_scratch(int64_t n) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(static_cast<size_t>(n));
  return scratch.data();
}

}  // namespace mt::kernels::cpu
