// Elementwise ops: unary math and activations, scalar forms, binary ops with
// broadcasting, comparisons, where/masked_fill, dtype promotion and errors.
#include <cmath>

#include "test_util.h"

using namespace mt;
using namespace mt::test;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input domain (kept away from kinks and singularities by the random draw)
  double f16_tol = kF16Tol;
  double bf16_tol = kBF16Tol;
};

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2, 4},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 4},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.2, 4},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -2, 2},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -2, 2},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, 0.5, 3},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -2,
       2},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -2, 2},
      {"gelu(erf)", [](const Tensor& x) { return gelu(x); }, gelu_erf, -3, 3},
      {"gelu(tanh)", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }, gelu_tanh, -3, 3},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -3, 3},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -3, 3},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -4, 4},
      {"pow(x, 3)", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, -2, 2},
      {"pow(x, 2) negative base", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }, -2,
       -0.1},
      {"pow(x, 0.5)", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }, 0.2, 4},
      {"pow(x, -1.5)", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 0.5,
       3},
      {"pow(x, 0)", [](const Tensor& x) { return pow(x, 0.0); }, [](double) { return 1.0; }, -2, 2},
      {"clamp(-0.5, 0.7)", [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
       [](double x) { return std::min(std::max(x, -0.5), 0.7); }, -2, 2},
      {"clamp(min=0.3)", [](const Tensor& x) { return clamp(x, 0.3, std::nullopt); },
       [](double x) { return std::max(x, 0.3); }, -2, 2},
      {"clamp(max=-0.2)", [](const Tensor& x) { return clamp(x, std::nullopt, -0.2); },
       [](double x) { return std::min(x, -0.2); }, -2, 2},
      // scalar forms
      {"add(x, 1.5)", [](const Tensor& x) { return add(x, 1.5); }, [](double x) { return x + 1.5; }, -2, 2},
      {"sub(x, 0.25)", [](const Tensor& x) { return sub(x, 0.25); }, [](double x) { return x - 0.25; }, -2, 2},
      {"mul(x, -3)", [](const Tensor& x) { return mul(x, -3.0); }, [](double x) { return x * -3; }, -2, 2},
      {"div(x, 4)", [](const Tensor& x) { return div(x, 4.0); }, [](double x) { return x / 4; }, -2, 2},
      {"rsub(x, 2)", [](const Tensor& x) { return rsub(x, 2.0); }, [](double x) { return 2 - x; }, -2, 2},
      {"2 - x", [](const Tensor& x) { return 2.0 - x; }, [](double x) { return 2 - x; }, -2, 2},
      {"3 / x", [](const Tensor& x) { return 3.0 / x; }, [](double x) { return 3 / x; }, 0.5, 3},
      {"-x", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -2, 2},
  };
}

}  // namespace

TEST_CASE("unary ops and activations: forward, gradcheck, f16/bf16", "[ops][elementwise]") {
  uint64_t seed = 100;
  for (const UnaryCase& c : unary_cases()) {
    DYNAMIC_SECTION(c.name) {
      const Tensor x = uniform64({3, 4}, c.lo, c.hi, ++seed);
      // forward against the naive reference, on a contiguous and a transposed input
      check_close(c.op(x), ref_map(x, c.ref), kF64Tol, std::string(c.name) + " forward");
      const Tensor xt = x.t();
      check_close(c.op(xt), ref_map(xt, c.ref), kF64Tol, std::string(c.name) + " forward (transposed input)");
      CHECK(c.op(x).sizes() == Shape{3, 4});
      CHECK(c.op(x).dtype() == kF64);

      require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x}, c.name);
      check_low_precision([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x}, c.name, c.f16_tol,
                          c.bf16_tol);
      // low precision keeps its dtype
      CHECK(c.op(x.to(kF16)).dtype() == kF16);
      CHECK(c.op(x.to(kBF16)).dtype() == kBF16);
    }
  }
}

TEST_CASE("unary ops: gradient comes back in the input's dtype", "[ops][elementwise]") {
  for (DType dt : {kF32, kF16, kBF16}) {
    Tensor x = uniform64({5}, 0.5, 2, 7).to(dt).requires_grad_();
    sum(exp(x)).backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == dt);
    check_close(x.grad(), ref_map(x, [](double v) { return std::exp(v); }), dt == kF32 ? 1e-6 : kBF16Tol, "d exp");
  }
}

TEST_CASE("activations at special points", "[ops][elementwise]") {
  const Tensor x = f64({-INFINITY, -50, -1, 0, 1, 50, INFINITY}, {7});
  check_close(relu(x), {0, 0, 0, 0, 1, 50, INFINITY});
  check_close(sigmoid(x), {0, sigmoid_ref(-50), sigmoid_ref(-1), 0.5, sigmoid_ref(1), sigmoid_ref(50), 1});
  check_close(tanh(x), {-1, -1, std::tanh(-1.0), 0, std::tanh(1.0), 1, 1});
  check_close(gelu(x.narrow(0, 1, 5)), {gelu_erf(-50), gelu_erf(-1), 0, gelu_erf(1), 50});
  // relu'(0) = 0, abs'(0) = 0, as in PyTorch
  Tensor z = f64({0, 0}, {2}).requires_grad_();
  sum(add(relu(z), abs(z))).backward();
  check_equal(z.grad(), {0, 0}, "relu'(0) + abs'(0)");
  // clamp passes the gradient on its boundaries (min <= x <= max)
  Tensor b = f64({-1, 0.5, 1, 2}, {4}).requires_grad_();
  sum(clamp(b, -1.0, 1.0)).backward();
  check_equal(b.grad(), {1, 1, 1, 0}, "clamp'");
  // NaN passes through clamp
  CHECK(std::isnan(clamp(f64({NAN}, {1}), 0.0, 1.0).item<double>()));
  // f16 silu/gelu on large |x| stay finite (exp overflow must not leak)
  const Tensor big = f64({-30, 30}, {2}).to(kF16);
  check_close(silu(big), {0, 30}, 1e-3, 1e-3, "silu f16 large");
  check_close(gelu(big, GeluApproximation::Tanh), {0, 30}, 1e-3, 1e-3, "gelu tanh f16 large");
}

namespace {

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;  // domain of both operands
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, -2,
       2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, -2,
       2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, -2,
       2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, 0.5,
       2},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; },
       -2, 2},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; },
       -2, 2},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; },
       -2, 2},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; },
       0.5, 2},
  };
}

// Shape pairs exercising each broadcasting rule.
const std::vector<std::pair<Shape, Shape>> kBroadcastShapes = {
    {{2, 3}, {2, 3}},     // same shape
    {{2, 3}, {3}},        // missing leading dim
    {{2, 1, 3}, {4, 1}},  // both sides broadcast
    {{}, {2, 2}},         // 0-dim with a matrix
    {{3, 1}, {1}},        // size-1 against size-1
};

}  // namespace

TEST_CASE("binary ops with broadcasting: forward, gradcheck, f16/bf16", "[ops][elementwise]") {
  uint64_t seed = 500;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : kBroadcastShapes) {
      for (bool swap : {false, true}) {
        const Shape& shape_a = swap ? sb : sa;
        const Shape& shape_b = swap ? sa : sb;
        DYNAMIC_SECTION(c.name << " " << shape_str(shape_a) << " with " << shape_str(shape_b)) {
          const Tensor a = uniform64(shape_a, c.lo, c.hi, ++seed);
          const Tensor b = uniform64(shape_b, c.lo, c.hi, seed + 1000);
          const Tensor out = c.op(a, b);
          CHECK(out.sizes() == broadcast(shape_a, shape_b));
          check_close(out, ref_zip(a, b, c.ref), kF64Tol, std::string(c.name) + " forward");
          auto fn = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
          require_gradcheck(fn, {a, b}, c.name);
          check_low_precision(fn, {a, b}, c.name);
        }
      }
    }
  }
}

TEST_CASE("binary ops: gradient w.r.t. one operand only", "[ops][elementwise]") {
  Tensor a = uniform64({2, 3}, 0.5, 2, 1).requires_grad_();
  const Tensor b = uniform64({3}, 0.5, 2, 2);
  sum(div(a, b)).backward();
  check_close(a.grad(), ref_zip(a, b, [](double, double y) { return 1 / y; }), kF64Tol, "d(a/b)/da");
  CHECK_FALSE(b.requires_grad());
}

TEST_CASE("maximum/minimum: ties split the gradient, NaN propagates", "[ops][elementwise]") {
  Tensor a = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor b = f64({1, 0, 5}, {3}).requires_grad_();
  sum(maximum(a, b)).backward();
  check_equal(a.grad(), {0.5, 1, 0}, "maximum da");
  check_equal(b.grad(), {0.5, 0, 1}, "maximum db");
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  sum(minimum(a, b)).backward();
  check_equal(a.grad(), {0.5, 0, 1}, "minimum da");
  check_equal(b.grad(), {0.5, 1, 0}, "minimum db");

  const Tensor n = f64({NAN, 1, 2}, {3});
  const Tensor m = f64({0, NAN, 1}, {3});
  const auto mx = maximum(n, m).to_vector();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2);
  const auto mn = minimum(n, m).to_vector();
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1);
}

// Catches (PyTorch parity): maximum/minimum giving zero gradient at NaN
// positions (a `where(a >= b, g, 0)` rule); PyTorch zeroes only the side that
// lost, so a NaN on either side passes g to both.
TEST_CASE("maximum/minimum: a NaN on either side passes the gradient to both, as in PyTorch", "[ops][elementwise]") {
  for (bool is_max : {true, false}) {
    INFO((is_max ? "maximum" : "minimum"));
    Tensor a = f64({NAN, 1, 4}, {3}).requires_grad_();
    Tensor b = f64({2, NAN, 3}, {3}).requires_grad_();
    sum(is_max ? maximum(a, b) : minimum(a, b)).backward();
    check_equal(a.grad(), {1, 1, is_max ? 1.0 : 0.0}, "d a");
    check_equal(b.grad(), {1, 1, is_max ? 0.0 : 1.0}, "d b");
  }
}

// Catches (PyTorch parity): relu(NaN) = 0, which let NaN weights train
// silently (the NaN-loss guard never fired); PyTorch keeps the NaN and its
// threshold_backward passes the gradient at a NaN.
TEST_CASE("relu keeps a NaN and passes its gradient, in f64, f32 and bf16", "[ops][elementwise]") {
  for (DType dtype : {kF64, kF32, kBF16}) {
    INFO(dtype_name(dtype));
    Tensor x = f64({NAN, -1, 2, 0}, {4}).to(dtype).requires_grad_();
    const std::vector<double> y = relu(x).to_vector();
    CHECK(std::isnan(y[0]));
    CHECK(y[1] == 0);
    CHECK(y[2] == 2);
    sum(relu(x)).backward();
    check_equal(x.grad(), {1, 0, 1, 0}, "relu'");
  }
}

TEST_CASE("pow: gradients at a zero base and with a tensor exponent", "[ops][elementwise]") {
  // d(a^b)/db = a^b log a is defined as 0 at a == 0 (b >= 0), as in PyTorch.
  Tensor a = f64({0, 0, 2}, {3}).requires_grad_();
  Tensor b = f64({2, 0, 3}, {3}).requires_grad_();
  const Tensor y = pow(a, b);
  check_equal(y, {0, 1, 8}, "pow forward");
  sum(y).backward();
  check_close(a.grad(), {0, 0, 12}, kF64Tol, "pow da");
  check_close(b.grad(), {0, 0, 8 * std::log(2.0)}, kF64Tol, "pow db");
  // scalar exponent 0: gradient 0 everywhere (even at x = 0)
  Tensor x = f64({0, 3}, {2}).requires_grad_();
  sum(pow(x, 0.0)).backward();
  check_equal(x.grad(), {0, 0}, "d x^0");
}

TEST_CASE("dtype promotion of binary and scalar ops", "[ops][elementwise]") {
  const Tensor h = ones({2}, kF16), bf = ones({2}, kBF16), f = ones({2}, kF32), d = ones({2}, kF64);
  const Tensor i = from_vector(std::vector<int64_t>{3, 4}, {2}), b = from_vector(std::vector<double>{1, 0}, {2}, kBool);
  CHECK(add(h, bf).dtype() == kF32);  // neither holds the other
  CHECK(add(h, f).dtype() == kF32);
  CHECK(add(bf, d).dtype() == kF64);
  CHECK(add(i, h).dtype() == kF16);
  CHECK(add(i, i).dtype() == kI64);
  check_equal(add(i, i), {6, 8});
  CHECK(div(i, i).dtype() == kF32);  // true division
  check_close(div(i, from_vector(std::vector<int64_t>{2, 3}, {2})), {1.5, 4.0 / 3}, 1e-6, 1e-6, "int / int");
  // scalar forms keep the tensor's dtype; a fractional scalar makes an integer tensor f32
  CHECK(add(h, 0.5).dtype() == kF16);
  CHECK(mul(bf, 3.0).dtype() == kBF16);
  CHECK(add(i, 2.0).dtype() == kI64);
  check_equal(add(i, 2.0), {5, 6});
  CHECK(mul(i, 0.5).dtype() == kF32);
  check_equal(mul(i, 0.5), {1.5, 2});
  CHECK(div(i, 2.0).dtype() == kF32);
  check_equal(div(i, 2.0), {1.5, 2});
  CHECK(add(b, b).dtype() == kBool);
  // 0-dim tensors: PyTorch's result_type lets a 0-dim operand raise the
  // result only from a lower category (bool < integer < floating).
  // Catches: 0-dim tensors promoting like dimensioned ones (f32[2] + f64[] was f64).
  const Tensor d0 = scalar_tensor(0.5, kF64), f0 = scalar_tensor(2, kF32), i0 = scalar_tensor(2, kI64);
  CHECK(add(f, d0).dtype() == kF32);
  CHECK(mul(h, f0).dtype() == kF16);
  CHECK(mul(f0, bf).dtype() == kBF16);
  CHECK(add(i, d0).dtype() == kF64);  // integer tensor, floating 0-dim: the 0-dim counts
  CHECK(add(b, i0).dtype() == kI64);
  CHECK(add(i, i0).dtype() == kI64);
  CHECK(add(f0, d0).dtype() == kF64);  // both 0-dim: usual promotion
  CHECK(where(ne(f, 0.0), h, d0).dtype() == kF16);
  check_equal(add(f, d0), {1.5, 1.5});
  // unary float ops on integers compute a float result
  CHECK(exp(i).dtype() == kF32);
  check_close(sqrt(from_vector(std::vector<int64_t>{4, 9}, {2})), {2, 3}, 1e-6, 1e-6, "sqrt(int)");
  CHECK(abs(from_vector(std::vector<int64_t>{-4, 9}, {2})).dtype() == kI64);
  check_equal(abs(from_vector(std::vector<int64_t>{-4, 9}, {2})), {4, 9});
  check_equal(neg(i), {-3, -4});
  check_equal(clamp(from_vector(std::vector<int64_t>{-4, 9, 2}, {3}), 0.0, 5.0), {0, 5, 2});
}

TEST_CASE("scalar operands are applied in the compute type, not rounded to f16 first", "[ops][elementwise]") {
  // 1/3 rounded to f16 is 0.333251953; 3 * (1/3) in f32 then rounded to f16 is exactly 1.
  const Tensor x = full({1}, 3.0, kF16);
  CHECK(mul(x, 1.0 / 3.0).item<double>() == 1.0);
  // 0.1 in f32 then added to 2048 rounds to 2048 in f16 either way, but 1e-3 * 3000 must use the exact scalar:
  CHECK(mul(full({1}, 3000.0, kF16), 1e-3).item<double>() == 3.0);
}

// Catches (issue 33): an f32 0-dim *tensor* operand of an f16 op kept in f32,
// so f16 0.1 + f32[] 0.05 gave 0.1500244140625 (one rounding) where PyTorch
// gives 0.14990234375 (0.05 rounded to f16 first). The values are PyTorch
// 1.13's; the Python-scalar form keeps mixtape's single rounding.
TEST_CASE("an f32 0-dim tensor operand of an f16 op is rounded to f16 first, as in PyTorch",
          "[ops][elementwise][promotion]") {
  for (Device device : {kCPU, kSIM}) {
    INFO(device.str());
    const Tensor a = from_vector(std::vector<double>{0.1, 0.15, 0.3, 1.1, 0.05}, {5}, kF16, device);
    const Tensor b = scalar_tensor(0.05, kF32, device);
    auto values = [](const Tensor& t) { return t.to(kCPU).to_vector(); };
    REQUIRE(add(a, b).dtype() == kF16);
    CHECK(values(add(a, b)) ==
          std::vector<double>{0.14990234375, 0.199951171875, 0.35009765625, 1.1494140625, 0.0999755859375});
    CHECK(values(add(b, a))[1] == 0.199951171875);  // either side
    CHECK(values(mul(a, b))[3] == 0.054962158203125);
    CHECK(values(div(a, b))[2] == 6.00390625);
    CHECK(values(eq(a, b)) == std::vector<double>{0, 0, 0, 0, 1});
    // An integer 0-dim operand too: 2049 is 2048 in f16, and 2048 + 0.5 rounds to 2048.
    const Tensor half = from_vector(std::vector<double>{0.5}, {1}, kF16, device);
    CHECK(values(add(half, scalar_tensor(2049, kI64, device)))[0] == 2048.0);
    // The scalar forms do not round the scalar first.
    CHECK(values(add(a, 0.05))[0] == 0.1500244140625);
    CHECK(values(eq(a, 0.05))[4] == 0.0);
  }
}

TEST_CASE("comparisons: bool results, broadcasting, scalars, no gradient", "[ops][elementwise]") {
  const Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = f64({2, 2, 4}, {3});
  check_equal(eq(a, b), {0, 1, 0, 0, 0, 0}, "eq");
  check_equal(ne(a, b), {1, 0, 1, 1, 1, 1}, "ne");
  check_equal(lt(a, b), {1, 0, 1, 0, 0, 0}, "lt");
  check_equal(le(a, b), {1, 1, 1, 0, 0, 0}, "le");
  check_equal(gt(a, b), {0, 0, 0, 1, 1, 1}, "gt");
  check_equal(ge(a, b), {0, 1, 0, 1, 1, 1}, "ge");
  CHECK(eq(a, b).dtype() == kBool);
  CHECK(eq(a, b).sizes() == Shape{2, 3});
  check_equal(eq(a, 3.0), {0, 0, 1, 0, 0, 0}, "eq scalar");
  check_equal(ne(a, 3.0), {1, 1, 0, 1, 1, 1}, "ne scalar");
  check_equal(lt(a, 3.0), {1, 1, 0, 0, 0, 0}, "lt scalar");
  check_equal(le(a, 3.0), {1, 1, 1, 0, 0, 0}, "le scalar");
  check_equal(gt(a, 3.0), {0, 0, 0, 1, 1, 1}, "gt scalar");
  check_equal(ge(a, 3.0), {0, 0, 1, 1, 1, 1}, "ge scalar");
  // mixed dtypes and integers
  check_equal(eq(a.to(kF16), b.to(kBF16)), {0, 1, 0, 0, 0, 0}, "eq f16/bf16");
  check_equal(lt(from_vector(std::vector<int64_t>{1, 5}, {2}), 3.0), {1, 0}, "lt int scalar");
  // an f16 value compares against the scalar exactly, not against a rounded scalar
  check_equal(eq(full({1}, 0.1, kF16), 0.1), {0}, "f16 0.1 != 0.1");
  // NaN compares false (ne true)
  const Tensor n = f64({NAN}, {1});
  check_equal(eq(n, n), {0});
  check_equal(ne(n, n), {1});
  // comparisons do not take part in autograd
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  CHECK_FALSE(gt(x, 1.5).requires_grad());
  CHECK(gt(x, 1.5).grad_fn() == nullptr);
  // logical_and
  check_equal(logical_and(gt(a, 2.0), lt(a, 5.0)), {0, 0, 1, 1, 0, 0}, "logical_and");
}

TEST_CASE("where and masked_fill: forward, broadcasting, gradcheck, f16/bf16", "[ops][elementwise]") {
  const Tensor cond = from_vector(std::vector<double>{1, 0, 1, 0, 0, 1}, {2, 3}, kBool);
  const Tensor a = randn64({2, 3}, 1);
  const Tensor b = randn64({3}, 2);  // broadcast
  std::vector<double> want;
  const auto va = a.to_vector(), vb = b.to_vector(), vc = cond.to_vector();
  for (size_t i = 0; i < 6; ++i) want.push_back(vc[i] != 0 ? va[i] : vb[i % 3]);
  check_close(where(cond, a, b), want, kF64Tol, "where forward");
  auto fn = [&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); };
  require_gradcheck(fn, {a, b}, "where");
  check_low_precision(fn, {a, b}, "where");
  // broadcast condition (a row mask)
  const Tensor row = from_vector(std::vector<double>{0, 1, 0}, {3}, kBool);
  check_close(where(row, a, zeros({}, kF64)), {0, va[1], 0, 0, va[4], 0}, kF64Tol, "where row mask");
  // gradient routing
  Tensor x = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor y = f64({4, 5, 6}, {3}).requires_grad_();
  const Tensor c = from_vector(std::vector<double>{1, 0, 1}, {3}, kBool);
  sum(where(c, x, y)).backward();
  check_equal(x.grad(), {1, 0, 1}, "where dx");
  check_equal(y.grad(), {0, 1, 0}, "where dy");

  // masked_fill
  check_close(masked_fill(a, cond, -1.5), {-1.5, va[1], -1.5, va[3], va[4], -1.5}, kF64Tol, "masked_fill");
  check_close(masked_fill(a, row, 0.0), {va[0], 0, va[2], va[3], 0, va[5]}, kF64Tol, "masked_fill row mask");
  require_gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], cond, 2.0); }, {a}, "masked_fill");
  check_low_precision([&](const std::vector<Tensor>& in) { return masked_fill(in[0], cond, 2.0); }, {a}, "masked_fill");
  CHECK(masked_fill(a.to(kF16), cond, 1.0).dtype() == kF16);
  // -inf fill (attention masks)
  const auto inf_filled = masked_fill(a.to(kF16), cond, -INFINITY).to_vector();
  CHECK(std::isinf(inf_filled[0]));
  CHECK(inf_filled[0] < 0);
}

TEST_CASE("elementwise errors name the op, shapes and dtypes", "[ops][elementwise][errors]") {
  const Tensor a = zeros({2, 3}, kF32), b = zeros({4}, kF32);
  REQUIRE_THROWS_AS(add(a, b), Error);
  REQUIRE_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(mul(a, b), Catch::Contains("mul") && Catch::Contains("broadcast"));
  REQUIRE_THROWS_WITH(maximum(a, b), Catch::Contains("maximum"));
  REQUIRE_THROWS_WITH(lt(a, b), Catch::Contains("lt"));
  REQUIRE_THROWS_WITH(where(zeros({2, 3}, kF32), a, a), Catch::Contains("where") && Catch::Contains("bool"));
  REQUIRE_THROWS_WITH(where(zeros({2, 3}, kBool), a, b), Catch::Contains("where") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(masked_fill(a, zeros({2, 3}, kF32), 0.0),
                      Catch::Contains("masked_fill") && Catch::Contains("bool"));
  REQUIRE_THROWS_WITH(masked_fill(zeros({3}, kF32), zeros({2, 3}, kBool), 0.0),
                      Catch::Contains("masked_fill") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(clamp(a, 1.0, 0.0), Catch::Contains("clamp") && Catch::Contains("min"));
  REQUIRE_THROWS_WITH(clamp(a, std::nullopt, std::nullopt), Catch::Contains("clamp"));
  REQUIRE_THROWS_WITH(logical_and(a, a), Catch::Contains("logical_and") && Catch::Contains("bool"));
  // device mismatch: the simulator device is host memory, so this runs wherever the sim is built
  Tensor s;
  try {
    s = zeros({2, 3}, kF32, kSIM);
  } catch (const Error&) {
  }
  if (s.defined()) {
    REQUIRE_THROWS_WITH(add(a, s), Catch::Contains("add") && Catch::Contains("device") && Catch::Contains("sim"));
  }
  // requires_grad on an integer tensor
  Tensor i = from_vector(std::vector<int64_t>{1}, {1});
  REQUIRE_THROWS_WITH(i.requires_grad_(), Catch::Contains("floating"));
}

TEST_CASE("mixed-dtype binary ops: each gradient comes back in its input's dtype", "[ops][elementwise]") {
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}).to(kF16).requires_grad_();
  Tensor b = f64({0.5, 0.25, 2}, {3}).to(kF32).requires_grad_();
  Tensor c = f64({1, -1}, {2, 1}).to(kBF16).requires_grad_();
  const Tensor y = mul(add(a, c), b);  // f16 + bf16 -> f32, then * f32
  CHECK(y.dtype() == kF32);
  sum(y).backward();
  CHECK(a.grad().dtype() == kF16);
  CHECK(b.grad().dtype() == kF32);
  CHECK(c.grad().dtype() == kBF16);
  check_equal(a.grad(), {0.5, 0.25, 2, 0.5, 0.25, 2}, "da");
  check_equal(b.grad(), {5, 7, 9}, "db = sum over rows of (a + c)");
  check_equal(c.grad(), {2.75, 2.75}, "dc = sum of b per row");
  // where with f16 and f32 branches
  Tensor p = f64({1, 2}, {2}).to(kF16).requires_grad_();
  Tensor q = f64({3, 4}, {2}).to(kF32).requires_grad_();
  const Tensor w = where(from_vector(std::vector<double>{1, 0}, {2}, kBool), p, q);
  CHECK(w.dtype() == kF32);
  sum(w).backward();
  CHECK(p.grad().dtype() == kF16);
  check_equal(p.grad(), {1, 0});
  check_equal(q.grad(), {0, 1});
}
