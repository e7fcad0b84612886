// The CPU attention's BF16 dot-product tiles (kernels/attention/
// cpu_bf16_tiles.h) against f64 products of the same bf16 values: every
// packer, every view, the edges of the 8 x 32 register block.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention/cpu_bf16_tiles.h"
#include "runtime/half.h"

using namespace mt;
using namespace mt::kernels::cpu::bf16_tiles;

namespace {

std::vector<float> random_values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<BFloat16> to_bf16(const std::vector<float>& v) {
  std::vector<BFloat16> out;
  for (const float x : v) out.push_back(BFloat16(x));
  return out;
}

double rounded(float x) { return static_cast<float>(BFloat16(x)); }

// A strided matrix of floats: element (r, c) at data[r * stride + c].
struct Source {
  std::vector<float> data;
  int64_t stride;
  double at(int64_t r, int64_t c) const { return rounded(data[static_cast<size_t>(r * stride + c)]); }
};

// c (m x n, stride ldc) against alpha sum_t a(i, t) b(t, j) (+ c0).
void check_product(const std::vector<float>& c, int64_t ldc, const std::vector<float>& c0, bool accumulate, int64_t m,
                   int64_t n, int64_t k, float alpha, auto a, auto b) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, size = 0;
      for (int64_t t = 0; t < k; ++t) {
        want += a(i, t) * b(t, j);
        size += std::abs(a(i, t) * b(t, j));
      }
      want *= alpha;
      if (accumulate) want += c0[static_cast<size_t>(i * ldc + j)];
      INFO("element (" << i << ", " << j << ") of " << m << " x " << n << " x " << k);
      CHECK(std::abs(c[static_cast<size_t>(i * ldc + j)] - want) <= 1e-5 * (size + std::abs(want)) + 1e-30);
    }
  }
}

}  // namespace

// Catches: a pair of k taken from the wrong rows (or the odd k's last value
// paired with garbage), columns past n or rows past m written, the 16-lane
// masks off by one at 16 and 32, accumulate ignored or alpha applied to the
// old c, a transposed packer reading rows for columns, and the views'
// offsets (rows, columns, row_range) pointing at the wrong values.
TEST_CASE("bf16 tile products equal the f64 products of the rounded values, every packer and view",
          "[kernels][attention][bf16]") {
  if (!available()) {
    std::vector<uint16_t> sa, sb;
    const std::vector<float> one{1.0f};
    float c = 0;
    CHECK_THROWS(multiply(pack_rows(one.data(), 1, 1, 1, sa), pack_pairs(one.data(), 1, 1, 1, sb), 1, false, &c, 1));
    WARN("this CPU has no AVX512-BF16: the bf16 tile products were not run");
    return;
  }
  struct Size {
    int64_t m, n, k;
  };
  for (const Size size : {Size{8, 32, 64}, Size{13, 37, 7}, Size{64, 64, 64}, Size{1, 1, 1}, Size{9, 17, 2},
                          Size{3, 16, 5}, Size{17, 33, 31}}) {
    const int64_t m = size.m, n = size.n, k = size.k, pad = 3;
    // a as m rows of k (stride k + pad) and as its transpose; b as k rows of n and as its transpose.
    const Source a{random_values(m * (k + pad), 1), k + pad}, a_t{random_values(k * (m + pad), 2), m + pad};
    const Source b{random_values(k * (n + pad), 3), n + pad}, b_t{random_values(n * (k + pad), 4), k + pad};
    const std::vector<BFloat16> b16 = to_bf16(b.data), b_t16 = to_bf16(b_t.data);
    std::vector<uint16_t> sa, sb;
    for (const bool transposed_a : {false, true}) {
      for (const bool transposed_b : {false, true}) {
        for (const bool accumulate : {false, true}) {
          INFO("a " << (transposed_a ? "transposed" : "rows") << ", b " << (transposed_b ? "transposed" : "pairs")
                    << (accumulate ? ", accumulating" : ""));
          const Bf16Rows pa = transposed_a ? pack_rows_of_transpose(a_t.data.data(), a_t.stride, k, m, sa)
                                           : pack_rows(a.data.data(), a.stride, m, k, sa);
          const Bf16Pairs pb = transposed_b ? pack_pairs_of_transpose(b_t16.data(), b_t.stride, n, k, sb)
                                            : pack_pairs(b16.data(), b.stride, k, n, sb);
          const int64_t ldc = n + 5;
          const std::vector<float> c0 = random_values(m * ldc, 5);
          std::vector<float> c = c0;
          multiply(pa, pb, 0.5f, accumulate, c.data(), ldc);
          const auto a_at = [&](int64_t i, int64_t t) { return transposed_a ? a_t.at(t, i) : a.at(i, t); };
          const auto b_at = [&](int64_t t, int64_t j) { return transposed_b ? b_t.at(j, t) : b.at(t, j); };
          check_product(c, ldc, c0, accumulate, m, n, k, 0.5f, a_at, b_at);
          // Columns past n of each row are untouched.
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = n; j < ldc; ++j)
              CHECK(c[static_cast<size_t>(i * ldc + j)] == c0[static_cast<size_t>(i * ldc + j)]);
          }
        }
      }
    }
    // Views: rows of a, columns of b, and an even-first range of b's rows with a's matching columns.
    if (m >= 3 && n >= 3 && k >= 4) {
      const Bf16Rows pa = pack_rows(a.data.data(), a.stride, m, k, sa);
      const Bf16Pairs pb = pack_pairs(b16.data(), b.stride, k, n, sb);
      std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
      multiply(pa.rows(1, m - 2), pb.columns(2, n - 3), 1.0f, false, c.data(), n);
      check_product(
          c, n, c, false, m - 2, n - 3, k, 1.0f, [&](int64_t i, int64_t t) { return a.at(i + 1, t); },
          [&](int64_t t, int64_t j) { return b.at(t, j + 2); });
      // b's rows [2, k - 1): a packed from its columns [2, k - 1) as its own k.
      std::vector<float> a_cols(static_cast<size_t>(m * (k - 3)));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t t = 0; t < k - 3; ++t)
          a_cols[static_cast<size_t>(i * (k - 3) + t)] = a.data[static_cast<size_t>(i * a.stride + t + 2)];
      }
      // k - 3 is odd for odd k: b's view then has a real value where a's
      // packed rows hold their zero pad, so that pad must be zero in both packers.
      std::vector<float> a_cols_t(a_cols.size());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t t = 0; t < k - 3; ++t)
          a_cols_t[static_cast<size_t>(t * m + i)] = a_cols[static_cast<size_t>(i * (k - 3) + t)];
      }
      std::vector<uint16_t> sc;
      for (const bool transposed_a : {false, true}) {
        INFO("b's row range against a packed " << (transposed_a ? "from its transpose" : "from rows"));
        const Bf16Rows pa_cols = transposed_a ? pack_rows_of_transpose(a_cols_t.data(), m, k - 3, m, sc)
                                              : pack_rows(a_cols.data(), k - 3, m, k - 3, sc);
        multiply(pa_cols, pb.row_range(2, k - 3), 1.0f, false, c.data(), n);
        check_product(
            c, n, c, false, m, n, k - 3, 1.0f, [&](int64_t i, int64_t t) { return a.at(i, t + 2); },
            [&](int64_t t, int64_t j) { return b.at(t + 2, j); });
      }
    }
  }
}
