// Helpers for the tests that run a CPU kernel on each of its libraries
// (oneDNN where the build has it, Eigen always; MT_CPU_GEMM) and compare
// with f64: the library for one scope, the list to loop over, and the
// error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "kernels/common/cpu_backend.h"

namespace mt::test {

// Sets the CPU GEMM/convolution library for one scope.
struct UseLibrary {
  explicit UseLibrary(kernels::CpuGemmLibrary library) { kernels::set_cpu_gemm_library(library); }
  ~UseLibrary() { kernels::set_cpu_gemm_library(kernels::CpuGemmLibrary::Auto); }
};

inline std::vector<kernels::CpuGemmLibrary> cpu_libraries() {
  if (kernels::onednn_built()) return {kernels::CpuGemmLibrary::Eigen, kernels::CpuGemmLibrary::OneDnn};
  return {kernels::CpuGemmLibrary::Eigen};
}

inline const char* library_name(kernels::CpuGemmLibrary library) {
  return library == kernels::CpuGemmLibrary::Eigen ? "eigen" : "onednn";
}

inline std::vector<double> as_f64(const Tensor& t) {
  const Tensor c = t.to(kF64).contiguous();
  const double* p = static_cast<const double*>(c.data_ptr());
  return {p, p + c.numel()};
}

// Largest |got - want| relative to the largest |want| (products of random
// values: errors scale with the output, not per element). Infinite on a size
// mismatch, so a check against a tolerance fails.
inline double relative_error(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = as_f64(got);
  if (g.size() != want.size()) return INFINITY;
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

}  // namespace mt::test
