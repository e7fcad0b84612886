// Scans, sorting and sampling: cumsum, outer, topk, sort, argsort and
// multinomial — forward against f64 references, backward by gradcheck, the
// orders PyTorch documents (NaN largest, ties stable) and the sampling
// distribution. The CUDA kernels run on sim in tests/kernels/test_sim_ops.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "test_util.h"

using namespace mt;
using namespace mt::test;
using Catch::Matchers::Contains;

namespace {

// The order a stable sort of one row gives, NaN as the largest value.
std::vector<int64_t> ref_order(const std::vector<double>& row, bool descending) {
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  auto key = [&](int64_t i) { return std::isnan(row[i]) ? INFINITY : row[i]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a_nan = std::isnan(row[a]), b_nan = std::isnan(row[b]);
    if (a_nan != b_nan) return descending ? a_nan : b_nan;
    return descending ? key(a) > key(b) : key(a) < key(b);
  });
  return order;
}

std::vector<double> row_of(const Tensor& x, int64_t r) {
  const std::vector<double> all = x.contiguous().to_vector();
  const int64_t n = x.size(-1);
  return {all.begin() + r * n, all.begin() + (r + 1) * n};
}

}  // namespace

// Catches: a scan that restarts or skips along the wrong dim, and a backward
// that sums forward (it must sum from the end: dL/dx_i is sum over j >= i).
TEST_CASE("cumsum: values along each dim, gradient, integers and low precision", "[ops][sort]") {
  const Tensor x = randn64({3, 4, 5}, 21);
  for (int64_t dim : {0, 1, 2, -1}) {
    DYNAMIC_SECTION("dim " << dim) {
      const Tensor y = cumsum(x, dim);
      REQUIRE(y.sizes() == x.sizes());
      const int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<double> want(static_cast<size_t>(x.numel()));
      const std::vector<double> v = x.to_vector();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const Shape at = unravel(i, x.sizes());
        double s = 0;
        Shape c = at;
        for (int64_t k = 0; k <= at[static_cast<size_t>(d)]; ++k) {
          c[static_cast<size_t>(d)] = k;
          s += v[static_cast<size_t>(broadcast_index(c, x.sizes()))];
        }
        want[static_cast<size_t>(i)] = s;
      }
      check_close(y, want, kF64Tol, "cumsum");
      auto fn = [dim](const std::vector<Tensor>& in) { return cumsum(in[0], dim); };
      require_gradcheck(fn, {x}, "cumsum");
      check_low_precision(fn, {x}, "cumsum");
    }
  }
  // PyTorch: integer and bool inputs sum to i64.
  const Tensor ints = i64({3, -1, 4, 1}, {4});
  CHECK(cumsum(ints, 0).dtype() == kI64);
  check_equal(cumsum(ints, 0), {3, 2, 6, 7});
  check_equal(cumsum(from_vector(std::vector<double>{1, 0, 1}, {3}, kBool), 0), {1, 1, 2});
  // A strided input and the method form.
  check_close(x.transpose(0, 2).cumsum(0), cumsum(x.transpose(0, 2).contiguous(), 0).to_vector(), kF64Tol);
}

// Catches: outer's operands swapped (a [n, m] result must be a_i * b_j).
TEST_CASE("outer: a_i * b_j and its gradient", "[ops][sort]") {
  const Tensor a = randn64({3}, 22), b = randn64({4}, 23);
  const Tensor y = outer(a, b);
  REQUIRE(y.sizes() == Shape{3, 4});
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  std::vector<double> want;
  for (double ai : av)
    for (double bj : bv) want.push_back(ai * bj);
  check_close(y, want, kF64Tol);
  require_gradcheck([](const std::vector<Tensor>& in) { return outer(in[0], in[1]); }, {a, b}, "outer");
  CHECK_THROWS_WITH(outer(randn64({2, 2}, 1), b), Contains("two 1-D tensors"));
}

// Catches: a sort that is not stable (ties out of index order), NaN not
// treated as the largest value, descending giving ascending, values that do
// not follow the indices, and a gradient sent to the wrong positions.
TEST_CASE("sort, argsort and topk: orders, ties, NaN, gradient", "[ops][sort]") {
  const Tensor x = f64({2, NAN, -1, 2, 0.5, -INFINITY, NAN, 2, 0.5, INFINITY, -1, 3}, {2, 6});
  for (bool descending : {false, true}) {
    DYNAMIC_SECTION("descending " << descending) {
      const ValuesIndices r = sort(x, -1, descending);
      REQUIRE(r.indices.dtype() == kI64);
      for (int64_t row = 0; row < 2; ++row) {
        const std::vector<double> v = row_of(x, row);
        const std::vector<int64_t> want = ref_order(v, descending);
        const std::vector<double> got = row_of(r.indices, row), got_values = row_of(r.values, row);
        for (size_t j = 0; j < want.size(); ++j) {
          CHECK(got[j] == static_cast<double>(want[j]));
          const double expected = v[static_cast<size_t>(want[j])];
          CHECK((std::isnan(expected) ? std::isnan(got_values[j]) : got_values[j] == expected));
        }
      }
      CHECK(argsort(x, -1, descending).to_vector() == r.indices.to_vector());
    }
  }
  // topk: the first k of the descending (or ascending) order, along any dim.
  const Tensor y = randn64({4, 5, 3}, 24);
  for (int64_t dim : {0, 1, 2}) {
    for (bool largest : {true, false}) {
      DYNAMIC_SECTION("topk dim " << dim << " largest " << largest) {
        const ValuesIndices t = topk(y, 2, dim, largest);
        const ValuesIndices s = sort(y, dim, largest);
        CHECK(t.values.to_vector() == s.values.narrow(dim, 0, 2).contiguous().to_vector());
        CHECK(t.indices.to_vector() == s.indices.narrow(dim, 0, 2).contiguous().to_vector());
        require_gradcheck([dim, largest](const std::vector<Tensor>& in) { return topk(in[0], 2, dim, largest).values; },
                          {y}, "topk");
      }
    }
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return sort(in[0], 1, true).values; }, {y}, "sort");
  check_low_precision([](const std::vector<Tensor>& in) { return topk(in[0], 3, 1).values; }, {y}, "topk");
  // The method forms, and k = 0 / k = n at the edges.
  CHECK(y.topk(1).indices.to_vector() == argmax(y, -1, true).to_vector());
  CHECK(topk(y, 0, 1).values.sizes() == Shape{4, 0, 3});
  CHECK(y.argsort(1).sizes() == y.sizes());
  CHECK_THROWS_WITH(topk(y, 6, 1), Contains("k = 6 is out of range for a dim of size 5"));
}

namespace {

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t draws) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) continue;
    const double expected = p[i] * static_cast<double>(draws);
    chi += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return chi;
}

}  // namespace

// Catches: sampling that ignores the weights (uniform), picks the argmax
// every time, chooses a zero-weight category, repeats a category without
// replacement, or does not follow the generator's seed.
TEST_CASE("multinomial: frequencies follow the weights, zero weights are never drawn", "[ops][sort]") {
  const std::vector<double> w = {1, 0, 3, 6};  // unnormalised: p = 0.1, 0, 0.3, 0.6
  const std::vector<double> p = {0.1, 0, 0.3, 0.6};
  constexpr int64_t kRows = 4000;
  std::vector<double> tiled;
  for (int64_t r = 0; r < kRows; ++r) tiled.insert(tiled.end(), w.begin(), w.end());
  Generator gen(7);
  const Tensor draws = multinomial(from_vector(tiled, {kRows, 4}, kF32), 1, false, &gen);
  REQUIRE(draws.sizes() == Shape{kRows, 1});
  REQUIRE(draws.dtype() == kI64);
  std::vector<int64_t> counts(4, 0);
  for (double d : draws.to_vector()) ++counts[static_cast<size_t>(d)];
  CHECK(counts[1] == 0);
  // 2 degrees of freedom: chi-square above 13.8 has probability 0.001.
  CHECK(chi_square(counts, p, kRows) < 13.8);

  // With replacement from one row: many samples of the same distribution.
  Generator gen2(8);
  const Tensor many = multinomial(from_vector(w, {4}, kF64), kRows, true, &gen2);
  REQUIRE(many.sizes() == Shape{kRows});
  std::vector<int64_t> counts2(4, 0);
  for (double d : many.to_vector()) ++counts2[static_cast<size_t>(d)];
  CHECK(counts2[1] == 0);
  CHECK(chi_square(counts2, p, kRows) < 13.8);

  // Without replacement: distinct, and only the three positive categories.
  Generator gen3(9);
  const Tensor three = multinomial(from_vector(tiled, {kRows, 4}, kF32), 3, false, &gen3);
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<double> row = row_of(three, r);
    std::sort(row.begin(), row.end());
    CHECK(row == std::vector<double>{0, 2, 3});
  }
  // The first of the draws without replacement is the one-sample distribution.
  std::vector<int64_t> first(4, 0);
  for (int64_t r = 0; r < kRows; ++r) ++first[static_cast<size_t>(row_of(three, r)[0])];
  CHECK(chi_square(first, p, kRows) < 13.8);

  // The same seed draws the same samples.
  Generator a(11), b(11);
  CHECK(multinomial(from_vector(w, {4}), 5, true, &a).to_vector() ==
        multinomial(from_vector(w, {4}), 5, true, &b).to_vector());
}

// Catches: weights that would make silent garbage (negative, NaN, inf, a
// zero row, too few positive categories) accepted instead of named.
TEST_CASE("multinomial refuses weights it cannot sample from", "[ops][sort][errors]") {
  CHECK_THROWS_WITH(multinomial(f64({1, -1}, {2}), 1), Contains("finite and non-negative"));
  CHECK_THROWS_WITH(multinomial(f64({1, NAN}, {2}), 1), Contains("finite and non-negative"));
  CHECK_THROWS_WITH(multinomial(f64({1, INFINITY}, {2}), 1), Contains("finite and non-negative"));
  CHECK_THROWS_WITH(multinomial(f64({1, 1, 0, 0}, {2, 2}), 1), Contains("sums to 0"));
  CHECK_THROWS_WITH(multinomial(f64({1, 0, 0}, {3}), 2), Contains("only 1 positive weights"));
  CHECK_THROWS_WITH(multinomial(f64({1, 2}, {2}), 3), Contains("3 samples without replacement from 2"));
  CHECK_THROWS_WITH(multinomial(i64({1, 2}, {2}), 1), Contains("floating point"));
}
