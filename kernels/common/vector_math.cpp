#include "kernels/common/vector_math.h"

#include <cmath>

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
#endif

}  // namespace

void exp_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_expf8_u10, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
#endif
}

void erfc_n(const float* in, float* out, int64_t n) {
#if MT_WITH_SLEEF
  apply8(Sleef_erfcf8_u15, in, out, n);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = std::erfc(in[i]);
#endif
}

bool sleef_built() { return MT_WITH_SLEEF != 0; }

}  // namespace mt::kernels::cpu
