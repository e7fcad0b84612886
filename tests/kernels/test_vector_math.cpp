// The CPU's vectorised exp and erfc (kernels/common/vector_math.h) and the
// GELU built on them (kernels/elementwise/vector_gelu.h) against f64:
// within SLEEF's stated bounds (1.0 ulp for exp, 1.5 for erfc, plus the
// f32 rounding of the result), every length from 0 to 40 (the partial last
// vector), in place, and the edge values NaN, +-inf, overflow, underflow.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "kernels/common/vector_math.h"
#include "kernels/elementwise/vector_gelu.h"

using namespace mt;

namespace {

// |got - want| in units of the f32 spacing at want (subnormals at the smallest spacing).
double ulps(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(static_cast<float>(want))) return got == static_cast<float>(want) ? 0 : INFINITY;  // overflows f32
  const double spacing = std::max(std::ldexp(1.0, std::ilogb(std::max(std::abs(want), 1e-300)) - 23),
                                  static_cast<double>(std::numeric_limits<float>::denorm_min()));
  return std::abs(static_cast<double>(got) - want) / spacing;
}

std::vector<float> spread(int64_t n, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n);
  return v;
}

}  // namespace

TEST_CASE("vectorised exp and erfc are within their ulp bounds of f64 over the range (SLEEF wiring bugs)",
          "[kernels][cpu][vector_math]") {
  INFO("SLEEF built: " << kernels::cpu::sleef_built());
  const std::vector<float> x = spread(4001, -100.0f, 100.0f);
  std::vector<float> e(x.size()), c(x.size());
  kernels::cpu::exp_n(x.data(), e.data(), static_cast<int64_t>(x.size()));
  kernels::cpu::erfc_n(x.data(), c.data(), static_cast<int64_t>(x.size()));
  double worst_exp = 0, worst_erfc = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst_exp = std::max(worst_exp, ulps(e[i], std::exp(static_cast<double>(x[i]))));
    worst_erfc = std::max(worst_erfc, ulps(c[i], std::erfc(static_cast<double>(x[i]))));
  }
  CHECK(worst_exp <= 1.5);  // 1.0 ulp before the result's own f32 rounding
  CHECK(worst_erfc <= 2.0);
}

TEST_CASE("vectorised exp and erfc: edge values, every length's partial last vector, in place (tail bugs)",
          "[kernels][cpu][vector_math]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {nan, inf, -inf, 89.0f, -104.0f, 0.0f, -0.0f, 1e-30f, 10.0f, -10.0f};
  for (size_t i = 0; i < edges.size(); ++i) {
    float e = 0, c = 0;
    kernels::cpu::exp_n(&edges[i], &e, 1);
    kernels::cpu::erfc_n(&edges[i], &c, 1);
    INFO("x = " << edges[i]);
    CHECK(ulps(e, std::exp(static_cast<double>(edges[i]))) <= 1.5);
    CHECK(ulps(c, std::erfc(static_cast<double>(edges[i]))) <= 2.0);
  }
  for (int64_t n = 0; n <= 40; ++n) {
    INFO("n = " << n);
    std::vector<float> v = spread(n, -3.0f, 3.0f), before = v;
    v.push_back(12345.0f);  // one past the end: must stay untouched
    kernels::cpu::exp_n(v.data(), v.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(ulps(v[static_cast<size_t>(i)], std::exp(static_cast<double>(before[i]))) <= 1.5);
    CHECK(v.back() == 12345.0f);
  }
}

TEST_CASE("vectorised GELU (erf and tanh forms) and its backward match the f64 formulas at every length (GELU block bugs)",
          "[kernels][cpu][vector_math]") {
  const double k = std::sqrt(2.0 / M_PI);
  for (const bool tanh_form : {false, true}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{257}, int64_t{700}}) {
      INFO((tanh_form ? "tanh" : "erf") << " form, n = " << n);
      const std::vector<float> x = spread(n, -9.0f, 6.0f);
      std::vector<float> g(static_cast<size_t>(n)), y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = 0.5f + static_cast<float>(i % 5);
      if (tanh_form) {
        kernels::cpu::gelu_tanh_n(x.data(), y.data(), n);
        kernels::cpu::gelu_tanh_backward_n(x.data(), g.data(), dx.data(), n);
      } else {
        kernels::cpu::gelu_erf_n(x.data(), y.data(), n);
        kernels::cpu::gelu_erf_backward_n(x.data(), g.data(), dx.data(), n);
      }
      double worst_y = 0, worst_dx = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double xi = x[static_cast<size_t>(i)], gi = g[static_cast<size_t>(i)];
        double want_y = 0, want_dx = 0;
        if (tanh_form) {
          // 0.5 (1 + tanh u) = sigmoid(2u), which does not cancel for negative x.
          const double u = k * (xi + 0.044715 * xi * xi * xi);
          const double s = 1 / (1 + std::exp(-2 * u)), not_s = 1 / (1 + std::exp(2 * u));
          want_y = xi * s;
          want_dx = gi * (s + 2 * xi * s * not_s * k * (1 + 3 * 0.044715 * xi * xi));
        } else {
          const double cdf = 0.5 * std::erfc(-xi / std::sqrt(2.0));
          const double pdf = std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI);
          want_y = xi * cdf;
          want_dx = gi * (cdf + xi * pdf);
        }
        worst_y = std::max(worst_y, std::abs(y[static_cast<size_t>(i)] - want_y) / std::max(std::abs(want_y), 1e-30));
        // dx crosses zero (near x = -0.75): its error is measured against the size of its terms.
        worst_dx = std::max(worst_dx, std::abs(dx[static_cast<size_t>(i)] - want_dx) / (gi * (1 + std::abs(xi))));
      }
      CHECK(worst_y < 1e-5);
      CHECK(worst_dx < 1e-5);
    }
  }
}
