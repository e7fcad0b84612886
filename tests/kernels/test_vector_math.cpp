// The CPU's vectorised exp, log, tanh and erfc (kernels/common/vector_math.h)
// and the unary ops built on them (kernels/elementwise/vector_unary.h)
// against f64:
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
#include "kernels/elementwise/vector_unary.h"

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

// The unary ops that now run through the vector functions (elementwise
// exp, log, tanh, sigmoid and SiLU, forward, and SiLU's backward): within
// a few f32 ulps of f64 at every length around the 8-lane and 256-value
// blocks. Catches log_n or tanh_n wired to the wrong SLEEF function, a
// sigmoid with the sign of its exp flipped, SiLU's backward formula, and a
// partial block.
TEST_CASE("vectorised exp, log, tanh, sigmoid and SiLU (and its backward) match f64 at every length",
          "[kernels][cpu][vector_math]") {
  using kernels::UnaryOp;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, int64_t{256}, int64_t{257}, int64_t{700}}) {
    INFO("n = " << n);
    const std::vector<float> x = spread(n, -9.0f, 6.0f), positive = spread(n, 1e-3f, 50.0f);
    std::vector<float> g(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = 0.5f + static_cast<float>(i % 5);
    const auto worst = [&](UnaryOp op, const std::vector<float>& in, double (*want)(double)) {
      kernels::cpu::vector_unary_forward(op)(in.data(), y.data(), n);
      double w = 0;
      for (size_t i = 0; i < in.size(); ++i) w = std::max(w, ulps(y[i], want(in[i])));
      return w;
    };
    CHECK(worst(UnaryOp::Exp, x, [](double v) { return std::exp(v); }) <= 1.5);
    CHECK(worst(UnaryOp::Log, positive, [](double v) { return std::log(v); }) <= 1.5);
    CHECK(worst(UnaryOp::Tanh, x, [](double v) { return std::tanh(v); }) <= 1.5);
    CHECK(worst(UnaryOp::Sigmoid, x, [](double v) { return 1 / (1 + std::exp(-v)); }) <= 4);
    CHECK(worst(UnaryOp::Silu, x, [](double v) { return v / (1 + std::exp(-v)); }) <= 4);
    REQUIRE(kernels::cpu::vector_unary_backward(UnaryOp::Silu) != nullptr);
    kernels::cpu::vector_unary_backward(UnaryOp::Silu)(x.data(), g.data(), y.data(), n);
    double worst_dx = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x[static_cast<size_t>(i)], gi = g[static_cast<size_t>(i)], s = 1 / (1 + std::exp(-xi));
      const double want = gi * s * (1 + xi * (1 - s));
      worst_dx = std::max(worst_dx, std::abs(y[static_cast<size_t>(i)] - want) / (gi * (1 + std::abs(xi))));
    }
    CHECK(worst_dx < 1e-6);
  }
}

// Catches: the 16-bit erfc's fit with a wrong coefficient or sign (errors of
// 1e-3 and more), its reflection for negative x lost, its NaN/inf handling,
// a partial last vector, and a bf16 GELU that rounds differently from the
// exact one anywhere but at a rounding boundary.
TEST_CASE("erfc for 16-bit results is within 5e-6 of f64, and bf16 GELU rounds as the exact one does",
          "[kernels][cpu][vector_math]") {
  INFO("SLEEF built: " << kernels::cpu::sleef_built());
  const std::vector<float> x = spread(20001, -12.0f, 12.0f);
  std::vector<float> c(x.size());
  kernels::cpu::erfc_16bit_n(x.data(), c.data(), static_cast<int64_t>(x.size()));
  double worst = 0, worst_tiny = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::erfc(static_cast<double>(x[i]));
    if (want >= 1e-30) {
      worst = std::max(worst, std::abs(c[i] - want) / want);
    } else {
      worst_tiny = std::max(worst_tiny, std::abs(c[i] - want));
    }
  }
  WARN("erfc_16bit_n: largest relative error " << worst << " where erfc >= 1e-30");
  CHECK(worst <= 5e-6);  // seen: 3.9e-6, from rounding -x^2 to f32 near x = 8
  CHECK(worst_tiny <= 5e-36);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {nan, inf, -inf, 0.0f, -0.0f, 100.0f, -100.0f};
  const std::vector<double> expected = {NAN, 0.0, 2.0, 1.0, 1.0, 0.0, 2.0};
  for (size_t i = 0; i < edges.size(); ++i) {
    float got = -1;
    kernels::cpu::erfc_16bit_n(&edges[i], &got, 1);
    INFO("x = " << edges[i]);
    if (std::isnan(expected[i])) {
      CHECK(std::isnan(got));
    } else {
      CHECK(got == static_cast<float>(expected[i]));
    }
  }
  for (int64_t n = 0; n <= 20; ++n) {
    std::vector<float> v = spread(n, -3.0f, 3.0f), before = v;
    v.push_back(12345.0f);
    kernels::cpu::erfc_16bit_n(v.data(), v.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::erfc(static_cast<double>(before[static_cast<size_t>(i)]));
      CHECK(std::abs(v[static_cast<size_t>(i)] - want) <= 5e-6 * want);
    }
    CHECK(v.back() == 12345.0f);
  }

  // GELU forward and backward rounded to bf16: the exact results' rounding,
  // or one bf16 unit away where the exact value lies within 5e-6 of a tie.
  const int64_t n = 50000;
  const std::vector<float> xs = spread(n, -8.0f, 8.0f);
  std::vector<float> g(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  kernels::cpu::gelu_erf_16bit_n(xs.data(), y.data(), n);
  kernels::cpu::gelu_erf_backward_16bit_n(xs.data(), g.data(), dx.data(), n);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xi = xs[static_cast<size_t>(i)];
    const double cdf = 0.5 * std::erfc(-xi / std::sqrt(2.0)), pdf = std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI);
    for (const auto& [got, want] : {std::pair<float, double>{y[static_cast<size_t>(i)], xi * cdf},
                                    std::pair<float, double>{dx[static_cast<size_t>(i)], cdf + xi * pdf}}) {
      const float rounded = static_cast<float>(BFloat16(got)), exact = static_cast<float>(BFloat16(static_cast<float>(want)));
      if (rounded == exact) continue;
      ++differ;
      INFO("x = " << xi << ": got " << rounded << ", exact rounds to " << exact);
      CHECK(std::abs(static_cast<double>(rounded) - static_cast<double>(exact)) <= std::abs(exact) / 128 + 1e-38);
    }
  }
  WARN("bf16 GELU: " << differ << " of " << 2 * n << " results round differently from the exact ones");
  CHECK(differ <= 2 * n / 1000);
}
