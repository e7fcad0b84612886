// matmul (1-D, 2-D, batched with broadcast batch dims), bmm and linear.
#include <cmath>
#include <functional>

#include "test_util.h"

using namespace mt;
using namespace mt::test;

namespace {

// torch.matmul semantics by hand: promote 1-D operands, broadcast the batch
// dims, multiply in f64 with a plain triple loop, drop the promoted dims.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.sizes(), sb = b.sizes();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const Shape batch = broadcast(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  const Shape a_batch(sa.begin(), sa.end() - 2), b_batch(sb.begin(), sb.end() - 2);
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  std::vector<double> out;
  for (int64_t bi = 0; bi < shape_numel(batch); ++bi) {
    const Shape c = unravel(bi, batch);
    const int64_t oa = broadcast_index(c, a_batch) * m * k, ob = broadcast_index(c, b_batch) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += va[static_cast<size_t>(oa + i * k + p)] * vb[static_cast<size_t>(ob + p * n + j)];
        }
        out.push_back(acc);
      }
    }
  }
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  return from_vector(out, out_shape, kF64);
}

const std::vector<std::pair<Shape, Shape>> kMatmulShapes = {
    {{4}, {4}},                 // dot
    {{4}, {4, 3}},              // vector @ matrix
    {{2, 4}, {4}},              // matrix @ vector
    {{2, 4}, {4, 3}},           // matrix @ matrix
    {{2, 3, 4}, {2, 4, 5}},     // batched
    {{2, 3, 4}, {4, 5}},        // batched @ shared matrix
    {{3, 4}, {2, 4, 5}},        // shared matrix @ batched
    {{4}, {2, 4, 3}},           // vector @ batched
    {{2, 3, 4}, {4}},           // batched @ vector
    {{2, 1, 3, 4}, {3, 4, 2}},  // broadcast batch dims
    {{1, 3, 4}, {2, 4, 2}},     // size-1 batch broadcast
};

}  // namespace

TEST_CASE("matmul: 1-D, 2-D and batched broadcast shapes", "[ops][linalg]") {
  uint64_t seed = 900;
  for (const auto& [sa, sb] : kMatmulShapes) {
    DYNAMIC_SECTION(shape_str(sa) << " @ " << shape_str(sb)) {
      const Tensor a = randn64(sa, ++seed), b = randn64(sb, seed + 100);
      const Tensor want = ref_matmul(a, b);
      check_close(matmul(a, b), want, kF64Tol, "matmul forward");
      auto fn = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
      require_gradcheck(fn, {a, b}, "matmul");
      check_low_precision(fn, {a, b}, "matmul");
      CHECK(matmul(a.to(kF16), b.to(kF16)).dtype() == kF16);
      CHECK(matmul(a.to(kBF16), b.to(kBF16)).dtype() == kBF16);
    }
  }
}

TEST_CASE("matmul and bmm on transposed and strided operands", "[ops][linalg]") {
  const Tensor a = randn64({4, 3}, 1), b = randn64({5, 4}, 2);
  // a^T @ b^T read through free transposed views
  check_close(matmul(a.t(), b.t()), ref_matmul(a.t().contiguous(), b.t().contiguous()), kF64Tol, "a^T @ b^T");
  const Tensor c = randn64({4, 6}, 3);
  const Tensor cs = c.slice(1, 0, 6, 2);  // [4, 3] with a column stride of 2
  check_close(matmul(a.t(), cs), ref_matmul(a.t().contiguous(), cs.contiguous()), kF64Tol, "strided columns");
  // f32 (mapped in place by the kernel) and f16 (converted) views
  check_close(matmul(a.t().to(kF32), b.t().to(kF32)), ref_matmul(a.t().contiguous(), b.t().contiguous()), kF32Tol,
              "f32 transposed");
  const Tensor x = randn64({2, 4, 3}, 4), y = randn64({2, 5, 4}, 5);
  check_close(bmm(x.transpose(1, 2), y.transpose(1, 2)),
              ref_matmul(x.transpose(1, 2).contiguous(), y.transpose(1, 2).contiguous()), kF64Tol, "bmm transposed");
  require_gradcheck([](const std::vector<Tensor>& in) { return bmm(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
                    {x, y}, "bmm transposed");
  // a batch dim expanded with stride 0
  const Tensor shared = randn64({1, 3, 4}, 6).expand({2, 3, 4});
  check_close(bmm(shared, y.transpose(1, 2)), ref_matmul(shared.contiguous(), y.transpose(1, 2).contiguous()), kF64Tol,
              "bmm expanded batch");
  // gradient when the upstream gradient is a broadcast view (sum's backward)
  Tensor p = randn64({3, 4}, 7).requires_grad_();
  const Tensor q = randn64({4, 2}, 8);
  sum(matmul(p, q)).backward();
  const std::vector<double> vq = q.to_vector();
  std::vector<double> want;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 4; ++k) want.push_back(vq[static_cast<size_t>(k * 2)] + vq[static_cast<size_t>(k * 2 + 1)]);
  check_close(p.grad(), want, kF64Tol, "d sum(p @ q) / dp");
}

TEST_CASE("bmm: forward, gradcheck, f16/bf16", "[ops][linalg]") {
  const Tensor a = randn64({3, 2, 4}, 10), b = randn64({3, 4, 5}, 11);
  check_close(bmm(a, b), ref_matmul(a, b), kF64Tol, "bmm forward");
  auto fn = [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); };
  require_gradcheck(fn, {a, b}, "bmm");
  check_low_precision(fn, {a, b}, "bmm");
  // f16 with a longer inner dim still rounds once (f32 accumulation)
  const Tensor c = randn64({1, 2, 64}, 12), d = randn64({1, 64, 3}, 13);
  check_low_precision(fn, {c, d}, "bmm K=64");
}

TEST_CASE("linear with and without bias", "[ops][linalg]") {
  const Tensor w = randn64({3, 4}, 20), bias = randn64({3}, 21);
  for (const Shape& xs : {Shape{4}, Shape{2, 4}, Shape{2, 2, 4}}) {
    DYNAMIC_SECTION("input " << shape_str(xs)) {
      const Tensor x = randn64(xs, 22);
      const Tensor y0 = ref_matmul(x, w.t().contiguous());
      check_close(linear(x, w), y0, kF64Tol, "linear no bias");
      const std::vector<double> v0 = y0.to_vector(), vb = bias.to_vector();
      std::vector<double> want;
      for (size_t i = 0; i < v0.size(); ++i) want.push_back(v0[i] + vb[i % 3]);
      check_close(linear(x, w, bias), want, kF64Tol, "linear with bias");
      CHECK(linear(x, w, bias).sizes() == y0.sizes());
      require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias},
                        "linear with bias");
      require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w}, "linear no bias");
      check_low_precision([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias},
                          "linear");
    }
  }
}

// Catches: an epilogue activation that differs from the elementwise op (the
// tanh form for erf, an activation before the bias), a backward that reads
// the output where it needs the pre-activation (GELU) or skips the
// activation's derivative, and a fused ReLU that turns a NaN into 0.
TEST_CASE("linear with a fused ReLU or GELU equals the activation of linear, forward and backward", "[ops][linalg]") {
  const Tensor w = randn64({3, 4}, 40), bias = randn64({3}, 41), x = randn64({2, 2, 4}, 42);
  struct Case {
    const char* name;
    LinearActivation fused;
    std::function<Tensor(const Tensor&)> separate;
  };
  const std::vector<Case> cases = {
      {"relu", LinearActivation::Relu, [](const Tensor& t) { return relu(t); }},
      {"gelu", LinearActivation::Gelu, [](const Tensor& t) { return gelu(t); }},
      {"gelu tanh", LinearActivation::GeluTanh, [](const Tensor& t) { return gelu(t, GeluApproximation::Tanh); }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const auto fused = [&](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], c.fused); };
    check_close(fused({x, w, bias}), c.separate(linear(x, w, bias)), kF64Tol, std::string(c.name) + " forward");
    require_gradcheck(fused, {x, w, bias}, std::string(c.name) + " fused");
    check_low_precision(fused, {x, w, bias}, std::string("linear+") + c.name);
    // Without a bias, and without gradients (no pre-activation kept).
    check_close(linear(x, w, Tensor(), c.fused), c.separate(linear(x, w)), kF64Tol, std::string(c.name) + " no bias");
  }
  const Tensor nan_row = from_vector(std::vector<double>{NAN, 1, 1, 1}, {1, 4}, kF64);
  for (double v : linear(nan_row, w, bias, LinearActivation::Relu).to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("linear: gradients of weight and bias in their own dtypes", "[ops][linalg]") {
  Tensor w = randn64({3, 4}, 30).to(kF16).requires_grad_();
  Tensor b = randn64({3}, 31).to(kF16).requires_grad_();
  const Tensor x = randn64({5, 4}, 32).to(kF16);
  sum(linear(x, w, b)).backward();
  CHECK(w.grad().dtype() == kF16);
  CHECK(b.grad().dtype() == kF16);
  check_close(b.grad(), {5, 5, 5}, 0.0, 0.0, "d bias = rows");
  // d w[o][i] = sum_r x[r][i]
  const std::vector<double> colsum = sum(x.to(kF32), {0}).to_vector();
  std::vector<double> want;
  for (int o = 0; o < 3; ++o) want.insert(want.end(), colsum.begin(), colsum.end());
  check_close(w.grad(), want, kF16Tol, kF16Tol, "d weight");
}

TEST_CASE("linalg errors name the op and the shapes", "[ops][linalg][errors]") {
  const Tensor a = zeros({2, 3}), b = zeros({4, 5});
  REQUIRE_THROWS_WITH(matmul(a, b),
                      Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(zeros({3}), zeros({4})), Catch::Contains("matmul"));
  REQUIRE_THROWS_WITH(matmul(zeros({}), zeros({3})), Catch::Contains("matmul") && Catch::Contains("1 dim"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
                      Catch::Contains("matmul") && Catch::Contains("broadcast"));
  REQUIRE_THROWS_WITH(bmm(a, b), Catch::Contains("bmm") && Catch::Contains("3-D"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({3, 3, 4})), Catch::Contains("bmm") && Catch::Contains("[2, 2, 3]"));
  REQUIRE_THROWS_WITH(bmm(zeros({1, 2, 3}), zeros({1, 3, 4}, kF16)),
                      Catch::Contains("bmm") && Catch::Contains("f16") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({3, 4}, kF64)), Catch::Contains("dtype"));
  const Tensor ints = from_vector(std::vector<int64_t>{1}, {1, 1, 1});
  REQUIRE_THROWS_WITH(bmm(ints, ints), Catch::Contains("bmm") && Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 5}), zeros({3, 4})), Catch::Contains("linear") && Catch::Contains("[2, 5]"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 4}), zeros({4})), Catch::Contains("linear") && Catch::Contains("weight"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 4}), zeros({3, 4}), zeros({4})),
                      Catch::Contains("linear") && Catch::Contains("bias"));
}

TEST_CASE("matmul with an empty inner or outer dim", "[ops][linalg]") {
  check_equal(matmul(zeros({2, 0}, kF64), zeros({0, 3}, kF64)), std::vector<double>(6, 0.0), "K = 0 gives zeros");
  CHECK(matmul(zeros({0, 4}, kF32), zeros({4, 3}, kF32)).sizes() == Shape{0, 3});
  Tensor a = zeros({2, 0}, kF32).requires_grad_();
  Tensor b = ones({0, 3}, kF32).requires_grad_();
  sum(matmul(a, b)).backward();
  CHECK(a.grad().sizes() == Shape{2, 0});
  CHECK(b.grad().sizes() == Shape{0, 3});
}
