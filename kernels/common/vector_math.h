// Vectorised transcendentals for the CPU kernels: exp, log, tanh and erfc
// over arrays of floats, eight at a time through SLEEF (Debian's libsleef-dev, the
// library PyTorch's CPU kernels vectorise exp and erf with), or libm's
// scalar functions in a build without it.
//
// Accuracy: SLEEF's expf8_u10 is within 1.0 ulp of the exact result and
// erfcf8_u15 within 1.5 ulp; glibc's scalar expf and erfcf, which they
// replace, are within about 1 ulp. Each element is computed on its own, so
// results never depend on the thread count or where a block starts.
#pragma once

#include <cstdint>

namespace mt::kernels::cpu {

// out[i] = exp(in[i]) for i < n; in may be out.
void exp_n(const float* in, float* out, int64_t n);
// out[i] = log(in[i]) for i < n (SLEEF's logf8_u10: within 1.0 ulp); in may be out.
void log_n(const float* in, float* out, int64_t n);
// out[i] = tanh(in[i]) for i < n (SLEEF's tanhf8_u10: within 1.0 ulp); in may be out.
void tanh_n(const float* in, float* out, int64_t n);
// out[i] = erfc(in[i]) for i < n; in may be out.
void erfc_n(const float* in, float* out, int64_t n);
// erfc for results that will be rounded to 16 bits (bf16 keeps 8
// significant bits, f16 11): within 5e-6 of the exact value, relative
// (where it is above 1e-30; below, within 5e-36; measured 3.9e-6, from
// rounding -x^2 to f32 in the exponent near x = 8), so after rounding it
// differs from the exact value's rounding only at a rounding boundary, by
// one unit of the 16-bit format. Numerical Recipes' erfcc (a Chebyshev fit
// of erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), relative error
// below 1.2e-7) in f32: one exp and one division per value, 1.4 ns per
// value against erfcf8_u15's 4.6 (one thread, AMD EPYC with AVX-512,
// measured 2026-12-05). Without SLEEF it is erfc_n.
void erfc_16bit_n(const float* in, float* out, int64_t n);

// True when this build vectorises them with SLEEF.
bool sleef_built();

// The calling thread's buffer of at least n floats, kept between calls: the
// row a kernel hands these functions (a row's shifted logits and their exp).
float* thread_f32_scratch(int64_t n);

}  // namespace mt::kernels::cpu
