// The CPU's row sums (kernels/common/lane_sum.h: f32 rows summed in f32
// blocks totalled in double; batch norm's statistics and the conv bias
// gradient) against f64, at every length that exercises a path: empty, the
// < 8 tail alone, one and two vectors, a 16-wide step plus a tail, one block
// exactly, a block and one more value, several blocks. Every term is at
// least 0.5 in magnitude and the bound is the stated 37 f32 ulps of the
// terms' magnitudes, so a term left out (a tail, a vector, a block) fails.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/lane_sum.h"

namespace {

// n values in [0.5, 4.5] with alternating signs.
std::vector<float> row(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float magnitude = 0.5f + 4.0f * static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
    v[static_cast<size_t>(i)] = (i % 2 == 0) ? magnitude : -magnitude;
  }
  return v;
}

// The bound: 37 f32 ulps (2^-24 relative each) of the terms' magnitudes.
double bound(double magnitudes) { return 37.0 * std::ldexp(1.0, -24) * magnitudes; }

const int64_t kLengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 511, 512, 513, 1000, 5000};

}  // namespace

TEST_CASE("f32 row sums are within 37 ulps of f64 at every length (tail, vector and block bugs)",
          "[kernels][cpu][row_sums]") {
  using namespace mt::kernels::cpu;
  for (const int64_t n : kLengths) {
    INFO("n = " << n);
    const std::vector<float> p = row(n), g = row(n + 3);  // g: another row, shifted
    const float m = 0.75f;
    double sum = 0, sum_abs = 0, squares = 0, products = 0, products_abs = 0;  // squares: their own magnitudes
    for (int64_t i = 0; i < n; ++i) {
      const double x = p[static_cast<size_t>(i)], d = x - m, gi = g[static_cast<size_t>(i + 3)];
      sum += x;
      sum_abs += std::fabs(x);
      squares += d * d;
      products += gi * d;
      products_abs += std::fabs(gi * d);
    }
    CHECK(std::fabs(sum_of(p.data(), n) - sum) <= bound(sum_abs));
    CHECK(std::fabs(sum_of_squared_deviations(p.data(), m, n) - squares) <= bound(squares));
    CHECK(std::fabs(sum_of_products_with_deviations(g.data() + 3, p.data(), m, n) - products) <= bound(products_abs));
  }
}

TEST_CASE("f64 row sums stay in double (an f32 rounding inside them is caught)", "[kernels][cpu][row_sums]") {
  using namespace mt::kernels::cpu;
  // 1 + 2^-30 is not an f32: a sum rounded through f32 anywhere loses it.
  const std::vector<double> p(100, 1.0 + std::ldexp(1.0, -30));
  CHECK(sum_of(p.data(), 100) == 100.0 * (1.0 + std::ldexp(1.0, -30)));
  CHECK(sum_of_squared_deviations(p.data(), 1.0, 100) == 100.0 * std::ldexp(1.0, -60));
  CHECK(sum_of_products_with_deviations(p.data(), p.data(), 1.0, 100) ==
        100.0 * (1.0 + std::ldexp(1.0, -30)) * std::ldexp(1.0, -30));
}

// bf16 and f16 rows are summed in place, each value widened in its lane:
// the same bits as summing their exact f32 copies. Catches a lane widened
// from the wrong element, or a 16-bit row read as if it were f32.
TEST_CASE("bf16 and f16 row sums read in place equal the sums of their f32 copies, bit for bit",
          "[kernels][cpu][row_sums]") {
  using namespace mt::kernels::cpu;
  for (const int64_t n : kLengths) {
    INFO("n = " << n);
    const std::vector<float> a = row(n), b = row(n + 3);
    std::vector<mt::BFloat16> a16(a.begin(), a.end()), b16(b.begin(), b.begin() + n);
    std::vector<mt::Half> ah(a.begin(), a.end()), bh(b.begin(), b.begin() + n);
    std::vector<float> a_bf16(a16.begin(), a16.end()), b_bf16(b16.begin(), b16.end());
    std::vector<float> a_f16(ah.begin(), ah.end()), b_f16(bh.begin(), bh.end());
    CHECK(sum_of(a16.data(), n) == sum_of(a_bf16.data(), n));
    CHECK(sum_of_squared_deviations(a16.data(), 0.25f, n) == sum_of_squared_deviations(a_bf16.data(), 0.25f, n));
    CHECK(sum_of_products_with_deviations(b16.data(), a16.data(), 0.25f, n) ==
          sum_of_products_with_deviations(b_bf16.data(), a_bf16.data(), 0.25f, n));
    CHECK(sum_of(ah.data(), n) == sum_of(a_f16.data(), n));
    CHECK(sum_of_squared_deviations(ah.data(), 0.25f, n) == sum_of_squared_deviations(a_f16.data(), 0.25f, n));
    CHECK(sum_of_products_with_deviations(bh.data(), ah.data(), 0.25f, n) ==
          sum_of_products_with_deviations(b_f16.data(), a_f16.data(), 0.25f, n));
  }
}
