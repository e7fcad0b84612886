// Vectorised transcendentals for the CPU kernels: exp and erfc over arrays
// of floats, eight at a time through SLEEF (Debian's libsleef-dev, the
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
// out[i] = erfc(in[i]) for i < n; in may be out.
void erfc_n(const float* in, float* out, int64_t n);

// True when this build vectorises them with SLEEF.
bool sleef_built();

}  // namespace mt::kernels::cpu
