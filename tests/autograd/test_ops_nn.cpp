// Neural-network functions: softmax/log_softmax, layer_norm, cross_entropy,
// mse_loss, embedding and dropout.
#include <cmath>
#include <numeric>

#include "test_util.h"

using namespace mt;
using namespace mt::test;

namespace {

// softmax (or log_softmax) of x over `dim`, by hand.
std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.sizes();
  const auto d = static_cast<size_t>(dim < 0 ? dim + x.dim() : dim);
  const std::vector<double> v = x.to_vector();
  const Shape strides = contiguous_strides(s);
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t base = i - unravel(i, s)[d] * strides[d];
    auto at = [&](int64_t k) { return v[static_cast<size_t>(base + k * strides[d])]; };
    double mx = -INFINITY;
    for (int64_t k = 0; k < s[d]; ++k) mx = std::max(mx, at(k));
    double sum = 0;
    for (int64_t k = 0; k < s[d]; ++k) sum += std::exp(at(k) - mx);
    const double lse = mx + std::log(sum);
    const double xi = v[static_cast<size_t>(i)];
    out[static_cast<size_t>(i)] = log ? xi - lse : std::exp(xi - lse);
  }
  return out;
}

// layer_norm over the trailing `n` elements of each row, by hand.
std::vector<double> ref_layer_norm(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<double> v = x.to_vector();
  const std::vector<double> vw = w.defined() ? w.to_vector() : std::vector<double>();
  const std::vector<double> vb = b.defined() ? b.to_vector() : std::vector<double>();
  std::vector<double> out;
  for (size_t r = 0; r < v.size() / static_cast<size_t>(n); ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += v[r * n + i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (v[r * n + i] - mean) * (v[r * n + i] - mean);
    var /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      double y = (v[r * n + i] - mean) / std::sqrt(var + eps);
      if (w.defined()) y *= vw[static_cast<size_t>(i)];
      if (b.defined()) y += vb[static_cast<size_t>(i)];
      out.push_back(y);
    }
  }
  return out;
}

// Per-row cross-entropy with label smoothing (0 for ignored rows).
std::vector<double> ref_cross_entropy_rows(const Tensor& logits, const std::vector<int64_t>& target,
                                           int64_t ignore_index, double smoothing) {
  const int64_t c = logits.size(-1);
  const std::vector<double> ls = ref_softmax(logits, -1, true);
  std::vector<double> out;
  for (size_t r = 0; r < target.size(); ++r) {
    if (target[r] == ignore_index) {
      out.push_back(0);
      continue;
    }
    double loss = 0;
    for (int64_t k = 0; k < c; ++k) {
      const double q = (k == target[r] ? 1 - smoothing : 0) + smoothing / static_cast<double>(c);
      loss -= q * ls[r * c + k];
    }
    out.push_back(loss);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- softmax

TEST_CASE("softmax and log_softmax over any dim", "[ops][nn]") {
  const Tensor x = randn64({2, 3, 4}, 1);
  for (bool log : {false, true}) {
    for (int64_t dim : {0, 1, 2, -1, -2}) {
      DYNAMIC_SECTION((log ? "log_softmax" : "softmax") << " dim " << dim) {
        auto op = [log, dim](const Tensor& t) { return log ? log_softmax(t, dim) : softmax(t, dim); };
        const Tensor y = op(x);
        CHECK(y.sizes() == x.sizes());
        check_close(y, ref_softmax(x, dim, log), kF64Tol, "forward");
        auto fn = [&](const std::vector<Tensor>& in) { return op(in[0]); };
        require_gradcheck(fn, {x}, log ? "log_softmax" : "softmax");
        check_low_precision(fn, {x}, log ? "log_softmax" : "softmax");
        CHECK(op(x.to(kF16)).dtype() == kF16);
        // a transposed input
        const Tensor xt = x.transpose(0, 2);
        check_close(op(xt), ref_softmax(xt.contiguous(), dim, log), kF64Tol, "transposed input");
      }
    }
  }
}

TEST_CASE("softmax is stable for large logits and handles 1-D / 0-dim inputs", "[ops][nn]") {
  const Tensor big = f64({1000, 1001, 1002}, {3});
  check_close(softmax(big, 0), ref_softmax(f64({0, 1, 2}, {3}), 0, false), kF64Tol, "shifted");
  check_close(log_softmax(big.to(kF16), 0), ref_softmax(f64({0, 1, 2}, {3}), 0, true), 1e-3, 1e-3,
              "f16 log_softmax of large logits");
  const Tensor with_inf = f64({-INFINITY, 0, 0}, {3});
  check_close(softmax(with_inf, 0), {0, 0.5, 0.5}, kF64Tol, "-inf logit (masked)");
  check_close(softmax(full({}, 3.0, kF64), 0), {1}, kF64Tol, "0-dim softmax");
  check_close(log_softmax(full({}, 3.0, kF64), 0), {0.0}, kF64Tol, "0-dim log_softmax");
  require_gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], 0); }, {randn64({5}, 2)}, "1-D");
  // rows sum to one
  const Tensor s = softmax(randn64({3, 7}, 3), 1);
  check_close(sum(s, {1}), {1, 1, 1}, 1e-12, "rows sum to 1");
}

// ---------------------------------------------------------------- layer_norm

TEST_CASE("layer_norm with and without weight/bias, multi-dim normalized_shape", "[ops][nn]") {
  const Tensor x = randn64({2, 3, 4}, 10);
  for (const Shape& ns : {Shape{4}, Shape{3, 4}}) {
    for (int affine = 0; affine < 4; ++affine) {
      const bool has_w = affine & 1, has_b = affine & 2;
      DYNAMIC_SECTION("normalized " << shape_str(ns) << " weight " << has_w << " bias " << has_b) {
        const Tensor w = has_w ? uniform64(ns, 0.5, 1.5, 11) : Tensor();
        const Tensor b = has_b ? randn64(ns, 12) : Tensor();
        const double eps = 1e-5;
        check_close(layer_norm(x, ns, w, b, eps), ref_layer_norm(x, shape_numel(ns), w, b, eps), 1e-10, "forward");
        std::vector<Tensor> inputs{x};
        if (has_w) inputs.push_back(w);
        if (has_b) inputs.push_back(b);
        auto fn = [&](const std::vector<Tensor>& in) {
          const Tensor wi = has_w ? in[1] : Tensor();
          const Tensor bi = has_b ? in[has_w ? 2 : 1] : Tensor();
          return layer_norm(in[0], ns, wi, bi, eps);
        };
        require_gradcheck(fn, inputs, "layer_norm");
        check_low_precision(fn, inputs, "layer_norm");
        // statistics stay f32: f16 in, f16 out
        CHECK(
            fn(std::vector<Tensor>{x.to(kF16), has_w ? w.to(kF16) : Tensor(), has_b ? b.to(kF16) : Tensor()}).dtype() ==
            kF16);
      }
    }
  }
}

TEST_CASE("layer_norm: strided input, large eps, f32 parameters with an f16 input", "[ops][nn]") {
  const Tensor x = randn64({4, 3}, 20);
  const Tensor xt = x.t();  // [3, 4], not contiguous
  check_close(layer_norm(xt, {4}), ref_layer_norm(xt.contiguous(), 4, Tensor(), Tensor(), 1e-5), 1e-10, "strided");
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0].t(), {4}, Tensor(), Tensor(), 0.5); },
                    {x}, "layer_norm eps 0.5");
  // a constant row normalises to 0 (var 0, rstd = 1/sqrt(eps)) and the bias shows through
  const Tensor c = full({1, 4}, 3.0, kF64), b = f64({1, 2, 3, 4}, {4});
  check_close(layer_norm(c, {4}, Tensor(), b), {1, 2, 3, 4}, kF64Tol, "constant row");
  // f16 input with f32 weight and bias: the gradients come back in each input's dtype
  Tensor xh = randn64({2, 4}, 21).to(kF16).requires_grad_();
  Tensor w = uniform64({4}, 0.5, 1.5, 22).to(kF32).requires_grad_();
  Tensor bb = randn64({4}, 23).to(kF32).requires_grad_();
  const Tensor y = layer_norm(xh, {4}, w, bb);
  CHECK(y.dtype() == kF16);
  sum(mul(y, y)).backward();
  CHECK(xh.grad().dtype() == kF16);
  CHECK(w.grad().dtype() == kF32);
  CHECK(bb.grad().dtype() == kF32);
}

// ---------------------------------------------------------------- cross_entropy

TEST_CASE("cross_entropy: class indices, ignore_index, label smoothing, reductions", "[ops][nn]") {
  const Tensor logits = randn64({4, 5}, 30);
  const std::vector<int64_t> labels = {1, 0, 4, 2};
  const std::vector<int64_t> with_ignored = {1, -100, 4, -100};
  struct Case {
    const char* name;
    std::vector<int64_t> target;
    CrossEntropyOptions options;
  };
  const std::vector<Case> cases = {
      {"mean", labels, {}},
      {"sum", labels, {-100, 0.0, Reduction::Sum}},
      {"none", labels, {-100, 0.0, Reduction::None}},
      {"ignore_index mean", with_ignored, {}},
      {"ignore_index sum", with_ignored, {-100, 0.0, Reduction::Sum}},
      {"ignore_index none", with_ignored, {-100, 0.0, Reduction::None}},
      {"custom ignore_index", {1, 3, 3, 0}, {3, 0.0, Reduction::Mean}},
      {"label_smoothing 0.1 mean", labels, {-100, 0.1, Reduction::Mean}},
      {"label_smoothing 0.3 none", labels, {-100, 0.3, Reduction::None}},
      {"label_smoothing + ignore_index", with_ignored, {-100, 0.2, Reduction::Mean}},
      {"label_smoothing 1", labels, {-100, 1.0, Reduction::Sum}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const Tensor target = i64(c.target, {4});
      const std::vector<double> rows =
          ref_cross_entropy_rows(logits, c.target, c.options.ignore_index, c.options.label_smoothing);
      const double total = std::accumulate(rows.begin(), rows.end(), 0.0);
      int64_t counted = 0;
      for (int64_t t : c.target) counted += t != c.options.ignore_index;
      const Tensor loss = cross_entropy(logits, target, c.options);
      CHECK(loss.dtype() == kF64);
      switch (c.options.reduction) {
        case Reduction::None:
          CHECK(loss.sizes() == Shape{4});
          check_close(loss, rows, kF64Tol, "none");
          break;
        case Reduction::Sum:
          CHECK(loss.dim() == 0);
          check_close(loss, {total}, kF64Tol, "sum");
          break;
        case Reduction::Mean:
          CHECK(loss.dim() == 0);
          check_close(loss, {total / static_cast<double>(counted)}, kF64Tol, "mean");
          break;
      }
      auto fn = [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, c.options); };
      require_gradcheck(fn, {logits}, c.name);
      check_low_precision(fn, {logits}, c.name);
      // f16/bf16 logits report an f32 loss
      CHECK(cross_entropy(logits.to(kF16), target, c.options).dtype() == kF32);
      CHECK(cross_entropy(logits.to(kBF16), target, c.options).dtype() == kF32);
    }
  }
}

TEST_CASE("cross_entropy: gradients of ignored rows are zero, gradient in the logits' dtype", "[ops][nn]") {
  Tensor logits = randn64({3, 4}, 40).requires_grad_();
  cross_entropy(logits, i64({2, -100, 1}, {3})).backward();
  const std::vector<double> g = logits.grad().to_vector();
  for (int k = 4; k < 8; ++k) CHECK(g[static_cast<size_t>(k)] == 0.0);
  // each counted row's gradient sums to zero (softmax - q, sum q = 1)
  CHECK(std::fabs(g[0] + g[1] + g[2] + g[3]) < 1e-12);
  Tensor lh = randn64({3, 4}, 41).to(kF16).requires_grad_();
  cross_entropy(lh, i64({0, 1, 2}, {3}), {-100, 0.1, Reduction::Mean}).backward();
  CHECK(lh.grad().dtype() == kF16);
  // every target ignored: mean is 0/0 = NaN (as PyTorch)
  CHECK(std::isnan(cross_entropy(randn64({2, 3}, 42), i64({-100, -100}, {2})).item<double>()));
  // an i32 target works like i64
  check_close(cross_entropy(logits.detach(), from_vector(std::vector<int64_t>{2, 0, 1}, {3}, kI32)),
              cross_entropy(logits.detach(), i64({2, 0, 1}, {3})).to_vector(), kF64Tol, "i32 target");
}

TEST_CASE("cross_entropy: 1-D unbatched logits", "[ops][nn]") {
  const Tensor logits = randn64({5}, 50);
  const Tensor target = i64({3}, {});
  const double want = ref_cross_entropy_rows(logits.reshape({1, 5}), {3}, -100, 0)[0];
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    const Tensor loss = cross_entropy(logits, target, {-100, 0.0, r});
    CHECK(loss.dim() == 0);
    check_close(loss, {want}, kF64Tol, "unbatched");
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return cross_entropy(in[0], target, {-100, 0.0, r});
        },
        {logits}, "unbatched");
  }
  check_close(cross_entropy(logits, target, {-100, 0.2, Reduction::Mean}),
              ref_cross_entropy_rows(logits.reshape({1, 5}), {3}, -100, 0.2), kF64Tol, "unbatched smoothing");
}

TEST_CASE("cross_entropy: large logits stay finite in f16", "[ops][nn]") {
  const Tensor logits = f64({60000, 0, -60000, 1, 2, 3}, {2, 3}).to(kF16);
  const Tensor loss = cross_entropy(logits, i64({0, 2}, {2}), {-100, 0.0, Reduction::None});
  check_close(loss, ref_cross_entropy_rows(f64({60000, 0, -60000, 1, 2, 3}, {2, 3}), {0, 2}, -100, 0), 1e-3, 1e-3,
              "f16 large logits");
}

// ---------------------------------------------------------------- mse_loss

TEST_CASE("mse_loss: reductions, gradcheck, f16/bf16", "[ops][nn]") {
  const Tensor a = randn64({3, 4}, 60), b = randn64({3, 4}, 61);
  std::vector<double> sq;
  const auto va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) sq.push_back((va[i] - vb[i]) * (va[i] - vb[i]));
  const double total = std::accumulate(sq.begin(), sq.end(), 0.0);
  check_close(mse_loss(a, b, Reduction::None), sq, kF64Tol, "none");
  check_close(mse_loss(a, b, Reduction::Sum), {total}, kF64Tol, "sum");
  check_close(mse_loss(a, b), {total / 12}, kF64Tol, "mean");
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    auto fn = [r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); };
    require_gradcheck(fn, {a, b}, "mse_loss");
    check_low_precision(fn, {a, b}, "mse_loss");
  }
}

// ---------------------------------------------------------------- embedding

TEST_CASE("embedding: lookup, repeated indices accumulate gradient", "[ops][nn]") {
  const Tensor w = randn64({5, 3}, 70);
  const Tensor idx = i64({4, 0, 4, 2, 4, 1}, {2, 3});
  const Tensor y = embedding(w, idx);
  CHECK(y.sizes() == Shape{2, 3, 3});
  const auto vw = w.to_vector();
  std::vector<double> want;
  for (int64_t i : {4, 0, 4, 2, 4, 1})
    for (int64_t k = 0; k < 3; ++k) want.push_back(vw[static_cast<size_t>(i * 3 + k)]);
  check_equal(y, want, "embedding forward");
  Tensor wg = w.detach().requires_grad_();
  sum(embedding(wg, idx)).backward();
  check_equal(wg.grad(), {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 3, 3, 3}, "counts of each row");
  require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); }, {w}, "embedding");
  check_low_precision([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); }, {w}, "embedding");
  // 1-D and 0-dim indices
  CHECK(embedding(w, i64({1, 2}, {2})).sizes() == Shape{2, 3});
  CHECK(embedding(w, i64({1}, {})).sizes() == Shape{3});
  check_equal(embedding(w, i64({1}, {})), {vw[3], vw[4], vw[5]}, "0-dim index");
  // f16 weights with repeated indices: gradient in f16, accumulated in f32
  Tensor wh = zeros({2, 2}, kF16).requires_grad_();
  const Tensor many = i64(std::vector<int64_t>(3000, 1), {3000});
  sum(embedding(wh, many)).backward();
  check_equal(wh.grad(), {0, 0, 3000, 3000}, "3000 repeats in f16 (exact: accumulated in f32, rounded once)");
}

// ---------------------------------------------------------------- dropout

TEST_CASE("dropout: identity cases, p = 1, mask statistics and gradient", "[ops][nn]") {
  const Tensor x = randn64({4, 5}, 80);
  Generator gen(7);
  check_equal(dropout(x, 0.0, true, &gen), x.to_vector(), "p = 0");
  check_equal(dropout(x, 0.5, false, &gen), x.to_vector(), "training false");
  check_equal(dropout(x, 1.0, true, &gen), std::vector<double>(20, 0.0), "p = 1");
  Tensor xg = x.detach().requires_grad_();
  sum(dropout(xg, 1.0, true, &gen)).backward();
  check_equal(xg.grad(), std::vector<double>(20, 0.0), "p = 1 gradient");

  // mask statistics over many elements: kept fraction ~ 1 - p, kept values scaled by 1/(1-p)
  const double p = 0.3;
  const int64_t n = 20000;
  Tensor ones_in = ones({n}, kF32).requires_grad_();
  const Tensor y = dropout(ones_in, p, true, &gen);
  const std::vector<double> vy = y.to_vector();
  int64_t kept = 0;
  for (double v : vy) {
    REQUIRE((v == 0.0 || v == Approx(1 / (1 - p))));
    kept += v != 0.0;
  }
  // binomial std = sqrt(n p (1-p)) ~ 65 elements: 5 sigma is ~0.016 of n
  CHECK(std::fabs(static_cast<double>(kept) / n - (1 - p)) < 0.016);
  // gradient equals mask / (1 - p): the same as the output for an all-ones input
  sum(y).backward();
  check_close(ones_in.grad(), vy, 1e-6, 1e-6, "gradient = mask / (1 - p)");
  // gradcheck with a fixed mask (same seed each call)
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator g(99);
        return dropout(in[0], 0.4, true, &g);
      },
      {x}, "dropout");
}

TEST_CASE("dropout: same seed gives the same mask, across dtypes too", "[ops][nn]") {
  const Tensor x = ones({64}, kF32);
  Generator g1(1234), g2(1234), g3(4321);
  const std::vector<double> a = dropout(x, 0.5, true, &g1).to_vector();
  const std::vector<double> b = dropout(x, 0.5, true, &g2).to_vector();
  const std::vector<double> c = dropout(x, 0.5, true, &g3).to_vector();
  CHECK(a == b);
  CHECK(a != c);
  // the generator advances: a second call gives a different mask
  CHECK(dropout(x, 0.5, true, &g1).to_vector() != a);
  // the mask depends on the seed and position only, not on the dtype
  Generator gh(1234);
  const std::vector<double> h = dropout(x.to(kF16), 0.5, true, &gh).to_vector();
  CHECK(h == a);
  CHECK(dropout(x.to(kBF16), 0.5, true, &g1).dtype() == kBF16);
  // manual_seed on the default generator replays too
  manual_seed(5);
  const std::vector<double> d1 = dropout(x, 0.5, true).to_vector();
  manual_seed(5);
  CHECK(dropout(x, 0.5, true).to_vector() == d1);
}

// Catches: the CPU's bf16 dropout (read and written where the tensors lie)
// drawing another mask than f32's, rounding the scaled value twice or not at
// all, mishandling the last partial group of 32, or a backward that scales
// by something else: forward and backward equal the f32 op's results
// rounded once to bf16.
TEST_CASE("dropout in bf16 on the CPU is the f32 dropout rounded once, forward and backward", "[ops][nn][bf16]") {
  const Tensor x = mul(randn64({3, 29}, 77), 3.0).to(kBF16), upstream = mul(randn64({3, 29}, 78), 5.0).to(kBF16);
  const Tensor xf = x.to(kF32).detach().requires_grad_(), xb = x.detach().requires_grad_();
  Generator g1(99), g2(99);
  const Tensor yf = dropout(xf, 0.3, true, &g1), yb = dropout(xb, 0.3, true, &g2);
  check_equal(yb, yf.to(kBF16).to_vector(), "forward");
  sum(mul(yf, upstream.to(kF32))).backward();
  sum(mul(yb, upstream)).backward();
  check_equal(xb.grad(), xf.grad().to(kBF16).to_vector(), "backward");
}

// The CPU kernels apply the keep flag as a bit mask; written as a product
// with the flag (x * scale * keep), a dropped inf or NaN would become NaN
// instead of the GPU's 0, and the backward would leak an inf upstream
// gradient through a dropped element.
TEST_CASE("dropout drops an inf or NaN to 0 and keeps it where kept, on every path", "[ops][nn][dropout]") {
  std::vector<double> specials(70);
  for (size_t i = 0; i < specials.size(); ++i) specials[i] = i % 2 == 0 ? INFINITY : NAN;
  for (const Device device : {kCPU, kSIM}) {
    for (const DType dtype : {kF32, kBF16, kF64}) {
      INFO(device.str() << " " << dtype_name(dtype));
      Generator g1(5), g2(5);
      const std::vector<double> kept_ones = dropout(ones({70}, dtype, device), 0.5, true, &g1).to_vector();
      const Tensor x = from_vector(specials, {70}).to(dtype).to(device).requires_grad_();
      const Tensor y = dropout(x, 0.5, true, &g2);
      y.backward(from_vector(std::vector<double>(70, INFINITY), {70}).to(dtype).to(device));
      const std::vector<double> out = y.to_vector(), grad = x.grad().to_vector();
      for (size_t i = 0; i < specials.size(); ++i) {
        INFO("element " << i);
        if (kept_ones[i] == 0.0) {
          CHECK(out[i] == 0.0);
          CHECK(grad[i] == 0.0);
        } else {
          CHECK((i % 2 == 0 ? out[i] == INFINITY : std::isnan(out[i])));
          CHECK(grad[i] == INFINITY);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- errors

TEST_CASE("nn errors name the op, shapes and what was expected", "[ops][nn][errors]") {
  const Tensor x = zeros({2, 3});
  // Catches (issue 14): logits with zero classes segfaulting in the kernel.
  for (Device device : {kCPU, kSIM}) {
    REQUIRE_THROWS_WITH(cross_entropy(zeros({3, 0}, kF32, device), zeros({3}, kI64, device)),
                        Catch::Contains("no classes"));
  }
  REQUIRE_THROWS_WITH(softmax(x, 2), Catch::Contains("softmax") && Catch::Contains("dim 2"));
  REQUIRE_THROWS_WITH(log_softmax(from_vector(std::vector<int64_t>{1}, {1}), 0),
                      Catch::Contains("log_softmax") && Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(layer_norm(x, {2}), Catch::Contains("layer_norm") && Catch::Contains("[2, 3]") &&
                                              Catch::Contains("normalized_shape"));
  REQUIRE_THROWS_WITH(layer_norm(x, {3}, zeros({2})), Catch::Contains("layer_norm") && Catch::Contains("[2]"));
  REQUIRE_THROWS_WITH(layer_norm(x, {3}, Tensor(), zeros({4})),
                      Catch::Contains("layer_norm") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(layer_norm(x, {}), Catch::Contains("layer_norm"));
  REQUIRE_THROWS_WITH(layer_norm(x, {3}, Tensor(), Tensor(), -1.0), Catch::Contains("eps"));

  const Tensor logits = zeros({2, 3});
  REQUIRE_THROWS_WITH(cross_entropy(logits, i64({0, 3}, {2})),
                      Catch::Contains("cross_entropy") && Catch::Contains("3") && Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, i64({0, -1}, {2})),
                      Catch::Contains("cross_entropy") && Catch::Contains("-1"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, i64({0, 1, 2}, {3})),
                      Catch::Contains("cross_entropy") && Catch::Contains("[3]") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, zeros({2})), Catch::Contains("cross_entropy") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(cross_entropy(zeros({2, 3, 4}), i64({0, 1}, {2})),
                      Catch::Contains("cross_entropy") && Catch::Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, i64({0, 1}, {2}), {-100, 1.5, Reduction::Mean}),
                      Catch::Contains("label_smoothing"));
  REQUIRE_THROWS_WITH(cross_entropy(from_vector(std::vector<int64_t>{1, 2}, {1, 2}), i64({0}, {1})),
                      Catch::Contains("cross_entropy") && Catch::Contains("floating"));

  REQUIRE_THROWS_WITH(mse_loss(zeros({2, 3}), zeros({3})),
                      Catch::Contains("mse_loss") && Catch::Contains("[2, 3]") && Catch::Contains("[3]"));

  REQUIRE_THROWS_WITH(embedding(zeros({5, 3}), i64({1, 5}, {2})),
                      Catch::Contains("5") && Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(embedding(zeros({5, 3}), i64({-1}, {1})),
                      Catch::Contains("-1") && Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(embedding(zeros({5}), i64({1}, {1})), Catch::Contains("embedding") && Catch::Contains("[5]"));
  REQUIRE_THROWS_WITH(embedding(zeros({5, 3}), zeros({2})), Catch::Contains("embedding") && Catch::Contains("f32"));

  REQUIRE_THROWS_WITH(dropout(x, 1.5, true), Catch::Contains("dropout") && Catch::Contains("1.5"));
  REQUIRE_THROWS_WITH(dropout(x, -0.1, true), Catch::Contains("dropout"));
}

// Catches: rope pairing neighbours (interleaved) instead of the two halves,
// a backward that rotates forward again (the transpose flips the sin terms),
// a bf16 input rotated in bf16 (the kernel computes in f32 and rounds
// once), the tables given a gradient, and the sim path disagreeing.
TEST_CASE("rope: fused rotation equals x cos + rotate_half(x) sin, gradcheck, sim", "[ops][nn][rope]") {
  const int64_t t = 5, d = 8;
  const Tensor angles = outer(arange(0, double(t), 1, kF64), randn64({d / 2}, 31));
  const Tensor cos = cat({angles, angles}, -1).cos().to(kF32), sin = cat({angles, angles}, -1).sin().to(kF32);
  const Tensor x = randn64({2, 3, t, d}, 32);
  const std::vector<Tensor> halves = split(x, d / 2, -1);
  const Tensor reference = add(mul(x, cos.to(kF64)), mul(cat({neg(halves[1]), halves[0]}, -1), sin.to(kF64)));
  check_close(rope(x, cos, sin), reference.to_vector(), 1e-14, 1e-14, "f64 forward");
  require_gradcheck([&](const std::vector<Tensor>& in) { return rope(in[0], cos, sin); }, {x}, "rope");
  // f32 on CPU and sim, and bf16: computed in f32, rounded once.
  const Tensor xf = x.to(kF32);
  const Tensor on_cpu = rope(xf, cos, sin);
  check_close(on_cpu, reference.to_vector(), 1e-6, 1e-6, "f32 cpu");
  check_close(rope(xf.to(kSIM), cos.to(kSIM), sin.to(kSIM)).to(kCPU), on_cpu.to_vector(), 1e-6, 1e-6, "sim");
  const Tensor xb = x.to(kBF16);
  const Tensor rounded_once = rope(xb.to(kF32), cos, sin).to(kBF16);
  CHECK(rope(xb, cos, sin).dtype() == kBF16);
  check_equal(rope(xb, cos, sin), rounded_once.to_vector(), "bf16 cpu");
  check_equal(rope(xb.to(kSIM), cos.to(kSIM), sin.to(kSIM)).to(kCPU), rounded_once.to_vector(), "bf16 sim");
  // Backward on sim: the transpose, as on the CPU.
  const Tensor up = randn64({2, 3, t, d}, 33).to(kF32);
  auto grad_of = [&](Device device) {
    const Tensor leaf = xf.to(device).detach().requires_grad_();
    sum(mul(rope(leaf, cos.to(device), sin.to(device)), up.to(device))).backward();
    return leaf.grad().to(kCPU);
  };
  check_close(grad_of(kSIM), grad_of(kCPU).to_vector(), 1e-6, 1e-6, "sim backward");
  const Tensor table = cos.detach().requires_grad_();
  sum(rope(x.to(kF32).requires_grad_(), table, sin)).backward();
  CHECK(!table.grad().defined());
  CHECK_THROWS_WITH(rope(x, cos.narrow(0, 0, 4), sin), Catch::Contains("must be [T, D] = [5, 8]"));
}

// Catches: swiglu's gate and up swapped, silu's derivative missing its
// g * sigmoid * (1 - sigmoid) term, a bf16 result rounded twice (silu then
// mul), and the sim path disagreeing.
TEST_CASE("swiglu: fused silu(gate) * up, gradcheck, sim, rounded once", "[ops][nn][swiglu]") {
  const Tensor g = mul(randn64({4, 6}, 41), 3.0), u = randn64({4, 6}, 42);
  check_close(swiglu(g, u), mul(silu(g), u).to_vector(), 1e-14, 1e-14, "f64 forward");
  require_gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); }, {g, u}, "swiglu");
  const Tensor gf = g.to(kF32), uf = u.to(kF32);
  const Tensor on_cpu = swiglu(gf, uf);
  check_close(swiglu(gf.to(kSIM), uf.to(kSIM)).to(kCPU), on_cpu.to_vector(), 1e-6, 1e-6, "sim");
  const Tensor gb = g.to(kBF16), ub = u.to(kBF16);
  const std::vector<double> once = swiglu(gb.to(kF32), ub.to(kF32)).to(kBF16).to_vector();
  check_equal(swiglu(gb, ub), once, "bf16 cpu");
  check_equal(swiglu(gb.to(kSIM), ub.to(kSIM)).to(kCPU), once, "bf16 sim");
  auto grads = [&](Device device) {
    const Tensor a = gf.to(device).detach().requires_grad_(), b = uf.to(device).detach().requires_grad_();
    sum(mul(swiglu(a, b), b.detach())).backward();
    return std::vector<std::vector<double>>{a.grad().to(kCPU).to_vector(), b.grad().to(kCPU).to_vector()};
  };
  const auto cpu = grads(kCPU), sim = grads(kSIM);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < cpu[k].size(); ++i) CHECK(sim[k][i] == Approx(cpu[k][i]).epsilon(1e-6).margin(1e-6));
  }
  CHECK_THROWS_WITH(swiglu(g, u.narrow(1, 0, 5)), Catch::Contains("swiglu: gate [4, 6] and up [4, 5]"));
}
