// Reductions over dims: sum, mean, var (correction), max/min with indices,
// argmax, keepdim, sum_to_size, and their errors.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "test_util.h"

using namespace mt;
using namespace mt::test;

namespace {

double ref_sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / static_cast<double>(v.size()); }
std::function<double(const std::vector<double>&)> ref_var(double correction) {
  return [correction](const std::vector<double>& v) {
    const double m = ref_mean(v);
    double acc = 0;
    for (double x : v) acc += (x - m) * (x - m);
    return acc / (static_cast<double>(v.size()) - correction);
  };
}

// The shape `x` reduces to over `dims` (empty = all).
Shape reduced_shape(const Shape& shape, Shape dims, bool keepdim) {
  const auto nd = static_cast<int64_t>(shape.size());
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  }
  for (int64_t& d : dims) d = d < 0 ? d + nd : d;
  Shape out;
  for (int64_t d = 0; d < nd; ++d) {
    const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r)
      out.push_back(shape[static_cast<size_t>(d)]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

const std::vector<Shape> kDimLists = {{}, {0}, {1}, {-1}, {0, 2}, {2, 0}, {0, 1, 2}};

}  // namespace

TEST_CASE("sum/mean/var over dims with keepdim: forward, gradcheck, f16/bf16", "[ops][reduce]") {
  const Tensor x = randn64({2, 3, 4}, 11);
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&, const Shape&, bool)> op;
    std::function<double(const std::vector<double>&)> ref;
  };
  const std::vector<Op> ops = {
      {"sum", [](const Tensor& t, const Shape& d, bool k) { return sum(t, d, k); }, ref_sum},
      {"mean", [](const Tensor& t, const Shape& d, bool k) { return mean(t, d, k); }, ref_mean},
      {"var(correction=1)", [](const Tensor& t, const Shape& d, bool k) { return var(t, d, 1, k); }, ref_var(1)},
      {"var(correction=0)", [](const Tensor& t, const Shape& d, bool k) { return var(t, d, 0, k); }, ref_var(0)},
  };
  for (const Op& op : ops) {
    for (const Shape& dims : kDimLists) {
      for (bool keepdim : {false, true}) {
        DYNAMIC_SECTION(op.name << " dims " << shape_str(dims) << " keepdim " << keepdim) {
          const Tensor y = op.op(x, dims, keepdim);
          CHECK(shape_str(y.sizes()) == shape_str(reduced_shape(x.sizes(), dims, keepdim)));
          check_close(y, ref_reduce(x, dims, op.ref), kF64Tol, op.name);
          // a permuted (non-contiguous) input gives the same values over the matching dims
          auto fn = [&](const std::vector<Tensor>& in) { return op.op(in[0], dims, keepdim); };
          require_gradcheck(fn, {x}, op.name);
          check_low_precision(fn, {x}, op.name);
        }
      }
    }
  }
}

TEST_CASE("reductions of non-contiguous inputs and 0-dim tensors", "[ops][reduce]") {
  const Tensor x = randn64({3, 4}, 12);
  const Tensor xt = x.t();  // [4, 3], strided
  check_close(sum(xt, {0}), ref_reduce(xt, {0}, ref_sum), kF64Tol, "sum of transposed");
  // Shape{...}: a bare {1} would pick var(x, double correction) (see the report on ops.h)
  check_close(var(xt, Shape{1}), ref_reduce(xt, {1}, ref_var(1)), kF64Tol, "var of transposed");
  check_close(mean(x.slice(1, 0, 4, 2), {1}), ref_reduce(x.slice(1, 0, 4, 2), {1}, ref_mean), kF64Tol,
              "mean of strided slice");
  // full reductions
  check_close(sum(x), {ref_sum(x.to_vector())}, kF64Tol, "sum()");
  CHECK(sum(x).dim() == 0);
  check_close(mean(x), {ref_mean(x.to_vector())}, kF64Tol, "mean()");
  check_close(var(x), {ref_var(1)(x.to_vector())}, kF64Tol, "var()");
  check_close(var(x, Shape{}, 0.0), {ref_var(0)(x.to_vector())}, kF64Tol, "var(correction=0)");
  // 0-dim input
  const Tensor s = full({}, 2.5, kF64);
  check_close(sum(s), {2.5});
  check_close(mean(s), {2.5});
  check_close(sum(s, {0}), {2.5});
  // gradient of a full reduction
  require_gradcheck([](const std::vector<Tensor>& in) { return var(in[0]); }, {x}, "var()");
  require_gradcheck([](const std::vector<Tensor>& in) { return mean(in[0]); }, {x}, "mean()");
}

TEST_CASE("sum of integers is i64, mean of integers is an error", "[ops][reduce]") {
  const Tensor i = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(i).dtype() == kI64);
  check_equal(sum(i, {1}), {6, 15}, "int sum");
  const Tensor b = from_vector(std::vector<double>{1, 0, 1}, {3}, kBool);
  CHECK(sum(b).dtype() == kI64);
  check_equal(sum(b), {2}, "bool sum");
  REQUIRE_THROWS_WITH(mean(i), Catch::Contains("mean") && Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(var(i), Catch::Contains("var") && Catch::Contains("floating"));
}

TEST_CASE("max/min with indices along a dim: forward, gradient to the chosen element", "[ops][reduce]") {
  const Tensor x = randn64({2, 3, 4}, 21);
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      DYNAMIC_SECTION("dim " << dim << " keepdim " << keepdim) {
        auto [vmax, imax] = max(x, dim, keepdim);
        auto [vmin, imin] = min(x, dim, keepdim);
        CHECK(imax.dtype() == kI64);
        CHECK(shape_str(vmax.sizes()) == shape_str(reduced_shape(x.sizes(), {dim}, keepdim)));
        CHECK(shape_str(imin.sizes()) == shape_str(reduced_shape(x.sizes(), {dim}, keepdim)));
        auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
        auto min_of = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
        auto argmax_of = [](const std::vector<double>& v) {
          return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin());
        };
        auto argmin_of = [](const std::vector<double>& v) {
          return static_cast<double>(std::min_element(v.begin(), v.end()) - v.begin());
        };
        check_equal(vmax, ref_reduce(x, {dim}, max_of), "max values");
        check_equal(imax, ref_reduce(x, {dim}, argmax_of), "max indices");
        check_equal(vmin, ref_reduce(x, {dim}, min_of), "min values");
        check_equal(imin, ref_reduce(x, {dim}, argmin_of), "min indices");
        check_equal(argmax(x, dim, keepdim), ref_reduce(x, {dim}, argmax_of), "argmax");
        require_gradcheck([&](const std::vector<Tensor>& in) { return max(in[0], dim, keepdim).values; }, {x}, "max");
        require_gradcheck([&](const std::vector<Tensor>& in) { return min(in[0], dim, keepdim).values; }, {x}, "min");
        check_low_precision([&](const std::vector<Tensor>& in) { return max(in[0], dim, keepdim).values; }, {x}, "max");
        // f16 indices agree with f32 ones when no two values round together (randn on 24 values)
        check_equal(max(x.to(kF16), dim, keepdim).indices, imax.to_vector(), "f16 max indices");
      }
    }
  }
}

TEST_CASE("max/min/argmax: ties pick the first index, NaN wins, full reductions", "[ops][reduce]") {
  Tensor x = f64({1, 3, 3, 0, 2, 2}, {2, 3}).requires_grad_();
  auto [v, i] = max(x, 1);
  check_equal(v, {3, 2});
  check_equal(i, {1, 1}, "first maximal index");
  sum(v).backward();
  check_equal(x.grad(), {0, 1, 0, 0, 1, 0}, "gradient goes to the chosen index only");
  check_equal(min(x, 1).indices, {0, 0});
  check_equal(argmax(x, 0), {0, 0, 0});
  check_equal(argmax(x), {1}, "flat argmax");
  CHECK(argmax(x).dim() == 0);
  check_equal(max(x), {3});
  check_equal(min(x), {0});
  CHECK(max(x).dim() == 0);
  // full max/min are differentiable
  require_gradcheck([](const std::vector<Tensor>& in) { return max(in[0]); }, {randn64({3, 2}, 5)}, "max()");
  require_gradcheck([](const std::vector<Tensor>& in) { return min(in[0]); }, {randn64({3, 2}, 6)}, "min()");
  // NaN propagates like PyTorch
  const Tensor n = f64({1, NAN, 3, 4, 5, 6}, {2, 3});
  auto [nv, ni] = max(n, 1);
  CHECK(std::isnan(nv.to_vector()[0]));
  CHECK(ni.to_vector()[0] == 1);
  CHECK(nv.to_vector()[1] == 6);
  CHECK(std::isnan(min(n).item<double>()));
  // integer input
  const Tensor ints = from_vector(std::vector<int64_t>{4, -7, 9}, {3});
  CHECK(max(ints, 0).values.dtype() == kI64);
  check_equal(max(ints, 0).values, {9});
  check_equal(argmax(ints), {2});
  // gradient through max of a broadcast (non-contiguous) upstream gradient
  Tensor y = randn64({3, 4}, 8).requires_grad_();
  sum(mul(max(y, 0, true).values, 2.0)).backward();
  CHECK(sum(y.grad()).item<double>() == Approx(8.0));
}

// Catches (PyTorch parity): full-tensor max()/min() sending the whole
// gradient to the first tied element; PyTorch spreads it evenly over every
// element equal to the result (over every NaN when the result is NaN).
TEST_CASE("max()/min() of the whole tensor spread the gradient evenly over ties and NaNs", "[ops][reduce]") {
  Tensor x = f64({1, 3, 3, 0, 3, 2}, {2, 3}).requires_grad_();
  sum(mul(max(x), 6.0)).backward();
  check_close(x.grad(), {0, 2, 2, 0, 2, 0}, kF64Tol, "max ties");
  x.set_grad(Tensor());
  min(x).backward();
  check_close(x.grad(), {0, 0, 0, 1, 0, 0}, kF64Tol, "min unique");
  Tensor n = f64({1, NAN, 2, NAN}, {4}).requires_grad_();
  min(n).backward();
  check_close(n.grad(), {0, 0.5, 0, 0.5}, kF64Tol, "min with NaNs");
  Tensor h = f64({2, 2, 1, 0}, {4}).to(kF16).requires_grad_();
  max(h).backward();
  CHECK(h.grad().dtype() == kF16);
  check_close(h.grad(), {0.5, 0.5, 0, 0}, 0.0, 0.0, "f16 ties");
}

TEST_CASE("sum_to_size reduces broadcast dims", "[ops][reduce]") {
  const Tensor x = randn64({2, 3, 4}, 31);
  check_close(sum_to_size(x, {3, 1}), ref_reduce(x, {0, 2}, ref_sum), kF64Tol, "to [3, 1]");
  CHECK(sum_to_size(x, {3, 1}).sizes() == Shape{3, 1});
  check_close(sum_to_size(x, {4}), ref_reduce(x, {0, 1}, ref_sum), kF64Tol, "to [4]");
  check_close(sum_to_size(x, {}), {ref_sum(x.to_vector())}, kF64Tol, "to []");
  check_close(sum_to_size(x, {2, 3, 4}), x.to_vector(), 0.0, 0.0, "identity");
  require_gradcheck([](const std::vector<Tensor>& in) { return sum_to_size(in[0], {1, 3, 1}); }, {x}, "sum_to_size");
  REQUIRE_THROWS_WITH(sum_to_size(x, {5}), Catch::Contains("sum_to_size") && Catch::Contains("[5]"));
  REQUIRE_THROWS_WITH(sum_to_size(zeros({3}), {2, 3}), Catch::Contains("sum_to_size"));
}

TEST_CASE("var with larger corrections and degenerate sizes", "[ops][reduce]") {
  const Tensor x = randn64({2, 5}, 41);
  check_close(var(x, {1}, 2.0), ref_reduce(x, {1}, ref_var(2)), kF64Tol, "correction 2");
  require_gradcheck([](const std::vector<Tensor>& in) { return var(in[0], {1}, 2.0); }, {x}, "var correction 2");
  // one element with Bessel's correction: 0/0, NaN as in PyTorch
  CHECK(std::isnan(var(f64({1.0}, {1})).item<double>()));
  CHECK(var(f64({1.0}, {1}), Shape{}, 0.0).item<double>() == 0.0);
}

TEST_CASE("reduction errors name the op and the dims", "[ops][reduce][errors]") {
  const Tensor x = zeros({2, 3});
  REQUIRE_THROWS_WITH(sum(x, {2}), Catch::Contains("sum") && Catch::Contains("dim 2") && Catch::Contains("range"));
  REQUIRE_THROWS_WITH(mean(x, {-3}), Catch::Contains("mean") && Catch::Contains("-3"));
  REQUIRE_THROWS_WITH(sum(x, {0, -2}), Catch::Contains("sum") && Catch::Contains("more than once"));
  REQUIRE_THROWS_WITH(var(x, Shape{5}), Catch::Contains("var") && Catch::Contains("dim 5"));
  REQUIRE_THROWS_WITH(max(x, 2), Catch::Contains("max") && Catch::Contains("range"));
  REQUIRE_THROWS_WITH(min(x, -3), Catch::Contains("min"));
  REQUIRE_THROWS_WITH(argmax(x, 7), Catch::Contains("argmax"));
  REQUIRE_THROWS_WITH(max(zeros({0})), Catch::Contains("max") && Catch::Contains("empty"));
  REQUIRE_THROWS_WITH(max(zeros({2, 0}), 1), Catch::Contains("empty"));
  REQUIRE_THROWS_WITH(argmax(zeros({0})), Catch::Contains("argmax") && Catch::Contains("empty"));
}

TEST_CASE("max/min/argmax over dim 0 of a 0-dim tensor", "[ops][reduce]") {
  Tensor s = full({}, 2.5, kF64).requires_grad_();
  auto [v, i] = max(s, 0);
  CHECK(v.dim() == 0);
  check_equal(v, {2.5});
  check_equal(i, {0});
  check_equal(argmax(s, 0), {0});
  check_equal(min(s, -1).values, {2.5});
  v.backward();
  check_equal(s.grad(), {1}, "gradient of max over a 0-dim tensor");
}

TEST_CASE("reductions over empty dims", "[ops][reduce]") {
  const Tensor e = zeros({2, 0}, kF64);
  check_equal(sum(e, {1}), {0, 0}, "empty sum is 0");
  CHECK(std::isnan(mean(e, {1}).to_vector()[0]));
  check_equal(sum(e, {0}), {}, "sum over a non-empty dim of an empty tensor");
  CHECK(sum(e, {0}).sizes() == Shape{0});
}

// Sums over leading dims of a dense tensor (a bias gradient: [N, C] over N)
// take a path of their own on the CPU that reads whole input rows in order,
// bf16/f16 ones (autocast's gradients) without widening a copy first.
// Each output must still be the double sum in index order, rounded once to
// f32 and then stored in the input's dtype, as the row walk does.
// Catches that path reading the wrong stride, splitting dims at the wrong
// place, accumulating in float, keeping a thread's partial sums, or reading
// 16-bit storage as f32.
TEST_CASE("sum/mean over leading dims: the double sum in index order, rounded once", "[ops][reduce]") {
  struct Case {
    Shape shape;
    Shape dims;
  };
  for (const DType dtype : {kF32, kBF16, kF16}) {
    for (const Case& c : std::vector<Case>{{{2048, 300}, {0}}, {{6, 50, 41}, {0, 1}}, {{7, 1, 3, 50}, {0}}}) {
      const Tensor x = randn64(c.shape, 77).to(dtype);
      const std::vector<double> v = x.to_vector();
      int64_t cols = 1;
      for (int64_t d : c.dims) cols *= c.shape[static_cast<size_t>(d)];
      const int64_t rows = x.numel() / cols;
      std::vector<double> want_sum, want_mean;
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t k = 0; k < cols; ++k) acc += v[static_cast<size_t>(k * rows + r)];
        want_sum.push_back(static_cast<float>(acc));
        want_mean.push_back(static_cast<float>(acc / static_cast<double>(cols)));
      }
      const auto stored = [&](const std::vector<double>& values) {  // f32 values rounded once more to dtype
        return from_vector(values, {rows}, kF32).to(dtype).to_vector();
      };
      INFO("shape " << x.shape_string() << " over " << c.dims.size() << " leading dims in " << dtype_name(dtype));
      CHECK(sum(x, c.dims).to_vector() == stored(want_sum));
      CHECK(mean(x, c.dims).to_vector() == stored(want_mean));
    }
  }
}
