// Views and shape ops (reshape/view, permute, transpose, narrow, slice, select,
// expand, squeeze/unsqueeze, flatten, contiguous, clone), dtype casts,
// cat/stack/split and index_select/gather.
#include <numeric>

#include "test_util.h"

using namespace mt;
using namespace mt::test;

namespace {

// 0, 1, 2, ... as f64, so a view's values spell out which elements it picked.
Tensor iota64(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  return f64(v, shape);
}

struct ViewCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  Shape out_shape;
  std::vector<double> want;  // values of op(iota64({2, 3, 4}))
};

std::vector<double> range(std::initializer_list<double> v) { return v; }

std::vector<ViewCase> view_cases() {
  std::vector<double> all(24);
  std::iota(all.begin(), all.end(), 0.0);
  std::vector<double> t01;  // transpose(0, 1): [3, 2, 4]
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) t01.push_back(i * 12 + j * 4 + k);
  std::vector<double> p201;  // permute(2, 0, 1): [4, 2, 3]
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) p201.push_back(i * 12 + j * 4 + k);
  std::vector<double> expanded;  // select(0, 1).select(0, 2) [4] -> unsqueeze(0).expand({3, 4})
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 4; ++k) expanded.push_back(20 + k);
  return {
      {"reshape", [](const Tensor& x) { return x.reshape({6, 4}); }, {6, 4}, all},
      {"reshape -1", [](const Tensor& x) { return x.reshape({-1, 8}); }, {3, 8}, all},
      {"view", [](const Tensor& x) { return x.view({4, 6}); }, {4, 6}, all},
      {"view -1", [](const Tensor& x) { return x.view({2, -1}); }, {2, 12}, all},
      {"reshape of a transposed view", [](const Tensor& x) { return x.transpose(0, 1).reshape({6, 4}); }, {6, 4}, t01},
      {"permute", [](const Tensor& x) { return x.permute({2, 0, 1}); }, {4, 2, 3}, p201},
      {"permute negative dims", [](const Tensor& x) { return x.permute({-1, 0, -2}); }, {4, 2, 3}, p201},
      {"transpose", [](const Tensor& x) { return x.transpose(0, 1); }, {3, 2, 4}, t01},
      {"transpose negative", [](const Tensor& x) { return x.transpose(-3, -2); }, {3, 2, 4}, t01},
      {"narrow", [](const Tensor& x) { return x.narrow(2, 1, 2); }, {2, 3, 2},
       range({1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22})},
      {"narrow negative start", [](const Tensor& x) { return x.narrow(1, -1, 1); }, {2, 1, 4},
       range({8, 9, 10, 11, 20, 21, 22, 23})},
      {"slice step 2", [](const Tensor& x) { return x.slice(2, 0, 4, 2); }, {2, 3, 2},
       range({0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22})},
      {"slice step 3 with offset", [](const Tensor& x) { return x.slice(2, 1, 4, 3); }, {2, 3, 1},
       range({1, 5, 9, 13, 17, 21})},
      {"slice negative and clamped end", [](const Tensor& x) { return x.slice(1, -2, 100); }, {2, 2, 4},
       range({4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23})},
      {"slice of a slice", [](const Tensor& x) { return x.slice(2, 1, 4).slice(2, 0, 3, 2); }, {2, 3, 2},
       range({1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23})},
      {"select", [](const Tensor& x) { return x.select(1, 2); }, {2, 4}, range({8, 9, 10, 11, 20, 21, 22, 23})},
      {"select negative", [](const Tensor& x) { return x.select(-1, -1); }, {2, 3},
       range({3, 7, 11, 15, 19, 23})},
      {"expand", [](const Tensor& x) { return x.select(0, 1).select(0, 2).unsqueeze(0).expand({3, 4}); }, {3, 4},
       expanded},
      {"expand -1 and new leading dims",
       [](const Tensor& x) { return x.narrow(0, 0, 1).narrow(1, 0, 1).expand({2, 2, -1, 4}); },
       {2, 2, 1, 4}, range({0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3})},
      {"unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); }, {2, 1, 3, 4}, all},
      {"unsqueeze last", [](const Tensor& x) { return x.unsqueeze(-1); }, {2, 3, 4, 1}, all},
      {"squeeze dim", [](const Tensor& x) { return x.unsqueeze(1).squeeze(1); }, {2, 3, 4}, all},
      {"squeeze non-1 dim is a no-op", [](const Tensor& x) { return x.squeeze(0); }, {2, 3, 4}, all},
      {"squeeze all", [](const Tensor& x) { return x.narrow(1, 1, 1).unsqueeze(0).squeeze(); }, {2, 4},
       range({4, 5, 6, 7, 16, 17, 18, 19})},
      {"flatten", [](const Tensor& x) { return x.flatten(); }, {24}, all},
      {"flatten 1..2", [](const Tensor& x) { return x.flatten(1); }, {2, 12}, all},
      {"flatten 0..1", [](const Tensor& x) { return x.flatten(0, 1); }, {6, 4}, all},
      {"flatten of a transposed view", [](const Tensor& x) { return x.transpose(0, 1).flatten(); }, {24}, t01},
      {"contiguous of a permuted view", [](const Tensor& x) { return x.permute({2, 0, 1}).contiguous(); }, {4, 2, 3},
       p201},
      {"clone", [](const Tensor& x) { return x.clone(); }, {2, 3, 4}, all},
      {"t() of a select", [](const Tensor& x) { return x.select(0, 0).t(); }, {4, 3},
       range({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11})},
  };
}

}  // namespace

TEST_CASE("views: values, shapes, gradcheck, low precision", "[ops][shape]") {
  const Tensor x = iota64({2, 3, 4});
  const Tensor r = randn64({2, 3, 4}, 3);
  for (const ViewCase& c : view_cases()) {
    DYNAMIC_SECTION(c.name) {
      const Tensor y = c.op(x);
      CHECK(shape_str(y.sizes()) == shape_str(c.out_shape));
      check_equal(y, c.want, c.name);
      auto fn = [&](const std::vector<Tensor>& in) { return c.op(in[0]); };
      require_gradcheck(fn, {r}, c.name);
      check_low_precision(fn, {r}, c.name);
      // views move values without arithmetic: on f16/bf16 they are exact
      check_equal(c.op(r.to(kF16)), c.op(r).to(kF16).to_vector(), std::string(c.name) + " f16");
      check_equal(c.op(r.to(kBF16)), c.op(r).to(kBF16).to_vector(), std::string(c.name) + " bf16");
      CHECK(c.op(x.to(kBF16)).dtype() == kBF16);
    }
  }
}

TEST_CASE("views share storage, contiguous/clone copies do not", "[ops][shape]") {
  const Tensor x = zeros({2, 3}, kF64);
  const Tensor v = x.transpose(0, 1);
  const Tensor s = x.select(0, 1);
  CHECK(v.storage() == x.storage());
  CHECK(s.storage() == x.storage());
  CHECK(x.view({6}).storage() == x.storage());
  CHECK(x.reshape({3, 2}).storage() == x.storage());  // contiguous input: a view
  CHECK(v.reshape({6}).storage() != x.storage());     // no view merges a transpose: a copy
  CHECK(v.reshape({3, 1, 2}).storage() == x.storage());  // a size-1 dim added: a view, as PyTorch
  CHECK(x.contiguous().storage() == x.storage());     // already contiguous: itself
  CHECK(v.contiguous().storage() != x.storage());
  CHECK(v.contiguous().is_contiguous());
  CHECK(x.clone().storage() != x.storage());
  fill_(s, 7.0);  // writes through the view
  check_equal(x, {0, 0, 0, 7, 7, 7});
  check_equal(v, {0, 7, 0, 7, 0, 7});
  const Tensor c = x.clone();
  fill_(x, 1.0);
  check_equal(c, {0, 0, 0, 7, 7, 7}, "clone is independent");
  // slicing keeps offsets: a view of a view
  const Tensor base = iota64({4, 5});
  const Tensor inner = base.narrow(0, 1, 2).narrow(1, 2, 3);
  CHECK(inner.offset() == 7);
  check_equal(inner, {7, 8, 9, 12, 13, 14});
  check_equal(inner.t().contiguous(), {7, 12, 8, 13, 9, 14});
}

TEST_CASE("view gradients accumulate through overlapping uses", "[ops][shape]") {
  Tensor x = iota64({2, 3}).requires_grad_();
  // x used through three different views of itself
  const Tensor y = add(sum(x.t()), add(sum(x.select(1, 0)), sum(x.expand({4, 2, 3}))));
  y.backward();
  check_equal(x.grad(), {6, 5, 5, 6, 5, 5});
  // slice with step scatters the gradient back to the strided positions only
  Tensor z = iota64({6}).requires_grad_();
  sum(mul(z.slice(0, 1, 6, 2), 3.0)).backward();
  check_equal(z.grad(), {0, 3, 0, 3, 0, 3});
}

TEST_CASE("to(dtype): values round once, gradient comes back in the source dtype", "[ops][shape]") {
  const Tensor x = f64({1.0, 1.0 / 3, 65504, 70000, -2.5}, {5});
  check_equal(x.to(kF32), {1.0, static_cast<double>(1.0f / 3), 65504, 70000, -2.5});
  const auto h = x.to(kF16).to_vector();
  CHECK(h[1] == Approx(1.0 / 3).epsilon(1e-3));
  CHECK(h[2] == 65504);
  CHECK(std::isinf(h[3]));  // overflow to inf
  check_equal(f64({1.7, -1.7, 2.5}, {3}).to(kI64), {1, -1, 2}, "truncation toward zero");
  check_equal(f64({0, 2, -0.5}, {3}).to(kBool), {0, 1, 1}, "nonzero is true");
  CHECK_FALSE(randn64({2}, 1).requires_grad_().to(kI64).requires_grad());

  for (DType src : {kF32, kF16, kBF16, kF64}) {
    for (DType dst : {kF32, kF16, kBF16, kF64}) {
      if (src == dst) continue;
      DYNAMIC_SECTION(dtype_name(src) << " -> " << dtype_name(dst)) {
        Tensor a = f64({0.5, -1.25, 2}, {3}).to(src).requires_grad_();
        const Tensor b = a.to(dst);
        CHECK(b.dtype() == dst);
        check_equal(b, {0.5, -1.25, 2}, "exactly representable values");
        sum(mul(b, 3.0)).backward();
        REQUIRE(a.grad().defined());
        CHECK(a.grad().dtype() == src);
        check_equal(a.grad(), {3, 3, 3}, "gradient of the cast");
      }
    }
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0].to(kF32).to(kF64); }, {randn64({3}, 2)}, "to",
                    {1e-3, 1e-5, 1e-3});
}

// ---------------------------------------------------------------- cat / stack / split

TEST_CASE("cat, stack and split: forward, gradcheck, dtype promotion", "[ops][shape]") {
  const Tensor a = iota64({2, 3}), b = add(iota64({2, 2}), 100.0), c = add(iota64({1, 3}), 200.0);
  check_equal(cat({a, b}, 1), {0, 1, 2, 100, 101, 3, 4, 5, 102, 103}, "cat dim 1");
  check_equal(cat({a, c}, 0), {0, 1, 2, 3, 4, 5, 200, 201, 202}, "cat dim 0");
  check_equal(cat({a, c}, -2), {0, 1, 2, 3, 4, 5, 200, 201, 202}, "cat dim -2");
  check_equal(cat({a}, 0), a.to_vector(), "cat of one");
  CHECK(cat({a.to(kF16), c.to(kF32)}, 0).dtype() == kF32);
  check_equal(cat({a.to(kF16), c.to(kBF16)}, 0), {0, 1, 2, 3, 4, 5, 200, 201, 202}, "promoted cat");
  check_equal(cat({a.t(), c.t()}, 1), {0, 3, 200, 1, 4, 201, 2, 5, 202}, "cat of transposed views");

  require_gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[2]}, 1); },
                    {randn64({2, 3}, 1), randn64({2, 1}, 2), randn64({2, 2}, 3)}, "cat");
  require_gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[0].t()}, 0); }, {randn64({2, 2}, 4)},
                    "cat of x with x^T");

  // stack
  const Tensor s0 = stack({a, add(a, 10.0)}, 0);
  CHECK(s0.sizes() == Shape{2, 2, 3});
  check_equal(s0, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}, "stack dim 0");
  const Tensor s2 = stack({a, add(a, 10.0)}, -1);
  CHECK(s2.sizes() == Shape{2, 3, 2});
  check_equal(s2, {0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}, "stack dim -1");
  require_gradcheck([](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, 1); },
                    {randn64({2, 3}, 5), randn64({2, 3}, 6)}, "stack");
  const Tensor u = randn64({2, 3}, 5), w = randn64({2, 3}, 6);
  check_equal(stack({u.to(kF16), w.to(kF16)}, 1), stack({u, w}, 1).to(kF16).to_vector(), "stack f16 exact");
  check_equal(cat({u.to(kBF16), w.to(kBF16)}, 1), cat({u, w}, 1).to(kBF16).to_vector(), "cat bf16 exact");

  // split
  const Tensor x = iota64({5, 2});
  const auto parts = split(x, 2, 0);
  REQUIRE(parts.size() == 3);
  check_equal(parts[0], {0, 1, 2, 3});
  check_equal(parts[2], {8, 9});
  CHECK(parts[2].sizes() == Shape{1, 2});
  const auto uneven = split(x, {1, 4}, 0);
  REQUIRE(uneven.size() == 2);
  check_equal(uneven[1], {2, 3, 4, 5, 6, 7, 8, 9});
  const auto cols = split(x, 1, -1);
  REQUIRE(cols.size() == 2);
  check_equal(cols[1], {1, 3, 5, 7, 9});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        const auto p = split(in[0], {1, 2}, 1);
        return add(mul(p[0], 2.0), sum(p[1], {1}, true));
      },
      {randn64({2, 3}, 7)}, "split");
}

// ---------------------------------------------------------------- index_select / gather

TEST_CASE("index_select and gather: forward, repeated indices, gradcheck", "[ops][shape]") {
  const Tensor x = iota64({3, 4});
  check_equal(index_select(x, 0, i64({2, 0, 2}, {3})), {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}, "dim 0");
  check_equal(index_select(x, 1, i64({3, 3, 1}, {3})), {3, 3, 1, 7, 7, 5, 11, 11, 9}, "dim 1");
  check_equal(index_select(x, -1, i64({0}, {1})), {0, 4, 8}, "dim -1");
  check_equal(index_select(x.t(), 0, i64({1}, {1})), {1, 5, 9}, "transposed input");
  check_equal(index_select(x, 0, from_vector(std::vector<int64_t>{1}, {1}, kI32)), {4, 5, 6, 7}, "i32 index");
  CHECK(index_select(x.to(kBF16), 0, i64({1}, {1})).dtype() == kBF16);
  const Tensor r = randn64({3, 4}, 10);
  require_gradcheck([](const std::vector<Tensor>& in) { return index_select(in[0], 1, i64({3, 0, 3, 3}, {4})); },
                    {r}, "index_select repeated");
  Tensor w = x.detach().requires_grad_();
  sum(index_select(w, 1, i64({3, 0, 3}, {3}))).backward();
  check_equal(w.grad(), {1, 0, 0, 2, 1, 0, 0, 2, 1, 0, 0, 2}, "index_select gradient counts");

  // gather: out[i][j] = x[i][idx[i][j]] (dim 1), x[idx[i][j]][j] (dim 0)
  const Tensor g1 = gather(x, 1, i64({3, 0, 1, 1, 2, 2}, {3, 2}));
  check_equal(g1, {3, 0, 5, 5, 10, 10}, "gather dim 1");
  const Tensor g0 = gather(x, 0, i64({2, 0, 1, 2}, {1, 4}));
  check_equal(g0, {8, 1, 6, 11}, "gather dim 0");
  check_equal(gather(x, 1, i64({1, 2}, {2, 1})), {1, 6}, "index smaller than input in the other dim");
  check_equal(gather(x.t(), 0, i64({2, 1}, {1, 2})), {2, 5}, "gather from a transposed view");
  require_gradcheck([](const std::vector<Tensor>& in) { return gather(in[0], 1, i64({3, 3, 1, 0, 2, 2}, {3, 2})); },
                    {r}, "gather repeated");
  require_gradcheck([](const std::vector<Tensor>& in) { return gather(in[0], 0, i64({2, 2, 0, 1}, {1, 4})); }, {r},
                    "gather dim 0");
  const Tensor gi = i64({3, 3, 1, 0, 2, 2}, {3, 2});
  check_equal(gather(r.to(kF16), 1, gi), gather(r, 1, gi).to(kF16).to_vector(), "gather f16 exact");
  check_equal(gather(r.to(kBF16), 1, gi), gather(r, 1, gi).to(kBF16).to_vector(), "gather bf16 exact");
  check_equal(index_select(r.to(kF16), 1, gi.flatten()), index_select(r, 1, gi.flatten()).to(kF16).to_vector(),
              "index_select f16 exact");
}

// Catches: index_add writing into its input (it returns a new tensor, as
// torch.index_add), repeated indices not summed, the source gradient not
// read back from the slot each slice went to, the sim path disagreeing.
TEST_CASE("index_add: out of place, repeated indices sum, gradcheck, sim", "[ops][shape]") {
  const Tensor x = iota64({3, 4});
  const Tensor src = full({2, 4}, 100.0, kF64);
  const Tensor out = index_add(x, 0, i64({2, 2}, {2}), src);
  check_equal(out, {0, 1, 2, 3, 4, 5, 6, 7, 208, 209, 210, 211}, "dim 0, a repeated index");
  check_equal(x, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "the input is left alone");
  check_equal(index_add(x, 1, i64({0, 3}, {2}), full({3, 2}, 1.0, kF64)), {1, 1, 2, 4, 5, 5, 6, 8, 9, 9, 10, 12},
              "dim 1");
  CHECK(index_add(x.to(kBF16), 0, i64({0}, {1}), zeros({1, 4})).dtype() == kF32);  // promotes, as add does
  const Tensor r = randn64({3, 4}, 11), s = randn64({4, 4}, 12);
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return index_add(in[0], 0, i64({1, 0, 1, 2}, {4}), in[1]); }, {r, s},
      "index_add repeated");
  const Tensor on_sim = index_add(r.to(kF32).to(kSIM), 0, i64({1, 0, 1, 2}, {4}).to(kSIM), s.to(kF32).to(kSIM));
  check_equal(on_sim.to(kCPU), index_add(r.to(kF32), 0, i64({1, 0, 1, 2}, {4}), s.to(kF32)).to_vector(), "sim");
  CHECK_THROWS_WITH(index_add(x, 0, i64({0}, {1}), src), Catch::Contains("index_add: source [2, 4] must be [1, 4]"));
}

TEST_CASE("copy_ and fill_: broadcast, cast, and the autograd guard", "[ops][shape]") {
  const Tensor dst = zeros({2, 3}, kF16);
  copy_(dst, f64({1, 2, 3}, {3}));
  check_equal(dst, {1, 2, 3, 1, 2, 3});
  fill_(dst.narrow(1, 0, 1), 9.0);
  check_equal(dst, {9, 2, 3, 9, 2, 3});
  Tensor leaf = zeros({2}).requires_grad_();
  REQUIRE_THROWS_WITH(fill_(leaf, 1.0), Catch::Contains("fill_") && Catch::Contains("NoGradGuard"));
  REQUIRE_THROWS_WITH(copy_(leaf, ones({2})), Catch::Contains("copy_"));
  {
    NoGradGuard guard;
    fill_(leaf, 1.0);
  }
  check_equal(leaf, {1, 1});
  REQUIRE_THROWS_WITH(copy_(zeros({3}), zeros({2, 3})), Catch::Contains("copy_") && Catch::Contains("[2, 3]"));
  // Like PyTorch's, copy_ moves data between devices (here CPU -> sim -> CPU).
  const Tensor on_sim = zeros({2, 3}, kF32, kSIM);
  copy_(on_sim, f64({1, 2, 3}, {3}));
  const Tensor back = zeros({2, 3}, kF16);
  copy_(back, on_sim);
  check_equal(back, {1, 2, 3, 1, 2, 3});
}

TEST_CASE("floating to narrow integer casts truncate, then wrap, as PyTorch", "[ops][shape]") {
  const Tensor x = f64({-5.7, 3.9, 255.0, 256.0}, {4});
  check_equal(x.to(kU8), {251, 3, 255, 0});
  check_equal(x.to(kF16).to(kU8), {251, 3, 255, 0});
  check_equal(x.to(kI32), {-5, 3, 255, 256});
}

TEST_CASE("shape errors name the op, the shape and what was expected", "[ops][shape][errors]") {
  const Tensor x = zeros({2, 3, 4});
  REQUIRE_THROWS_WITH(x.reshape({5, 5}), Catch::Contains("[5, 5]") && Catch::Contains("24"));
  REQUIRE_THROWS_WITH(x.reshape({-1, -1}), Catch::Contains("-1"));
  REQUIRE_THROWS_WITH(x.reshape({-1, 5}), Catch::Contains("24"));
  REQUIRE_THROWS_WITH(x.transpose(0, 1).view({24}), Catch::Contains("view") && Catch::Contains("contiguous") &&
                                                        Catch::Contains("reshape"));
  REQUIRE_THROWS_WITH(x.permute({0, 1}), Catch::Contains("permute") && Catch::Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(x.permute({0, 1, 1}), Catch::Contains("permute") && Catch::Contains("repeat"));
  REQUIRE_THROWS_WITH(x.transpose(0, 3), Catch::Contains("transpose") && Catch::Contains("dim 3"));
  REQUIRE_THROWS_WITH(x.narrow(1, 2, 2), Catch::Contains("narrow") && Catch::Contains("size 3"));
  REQUIRE_THROWS_WITH(x.slice(0, 0, 2, 0), Catch::Contains("slice") && Catch::Contains("step"));
  REQUIRE_THROWS_WITH(x.select(2, 4), Catch::Contains("select") && Catch::Contains("4"));
  REQUIRE_THROWS_WITH(x.select(2, -5), Catch::Contains("select"));
  REQUIRE_THROWS_WITH(x.expand({2, 5, 4}), Catch::Contains("expand") && Catch::Contains("[2, 5, 4]"));
  REQUIRE_THROWS_WITH(x.expand({3, 4}), Catch::Contains("expand"));
  REQUIRE_THROWS_WITH(x.expand({-1, 2, 3, 4}), Catch::Contains("expand"));
  REQUIRE_THROWS_WITH(x.unsqueeze(4), Catch::Contains("unsqueeze"));
  REQUIRE_THROWS_WITH(x.squeeze(3), Catch::Contains("squeeze"));
  REQUIRE_THROWS_WITH(x.flatten(2, 1), Catch::Contains("flatten"));

  REQUIRE_THROWS_WITH(cat({}, 0), Catch::Contains("cat") && Catch::Contains("empty"));
  REQUIRE_THROWS_WITH(cat({zeros({2, 3}), zeros({2, 4})}, 0),
                      Catch::Contains("cat") && Catch::Contains("[2, 4]") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cat({zeros({2, 3}), zeros({3})}, 0), Catch::Contains("cat") && Catch::Contains("dims"));
  REQUIRE_THROWS_WITH(cat({zeros({2, 3}), zeros({2, 3})}, 2), Catch::Contains("cat"));
  REQUIRE_THROWS_WITH(stack({zeros({2, 3}), zeros({3, 2})}, 0), Catch::Contains("stack") && Catch::Contains("[3, 2]"));
  REQUIRE_THROWS_WITH(split(x, {1, 2}, 0),
                      Catch::Contains("split") && Catch::Contains("[1, 2]") && Catch::Contains("size 2"));
  REQUIRE_THROWS_WITH(split(x, 0, 0), Catch::Contains("split"));

  REQUIRE_THROWS_WITH(index_select(x, 0, i64({2}, {1})), Catch::Contains("index_select") &&
                                                             Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(index_select(x, 0, zeros({1})), Catch::Contains("index_select") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(index_select(x, 0, i64({0, 1}, {1, 2})), Catch::Contains("index_select") &&
                                                                   Catch::Contains("1-D"));
  REQUIRE_THROWS_WITH(index_select(x, 3, i64({0}, {1})), Catch::Contains("index_select"));
  REQUIRE_THROWS_WITH(gather(x, 1, i64({3}, {1, 1, 1})),
                      Catch::Contains("gather") && Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(gather(x, 1, i64({0}, {1})), Catch::Contains("gather") && Catch::Contains("dims"));
  REQUIRE_THROWS_WITH(gather(x, 1, zeros({3, 3, 4}, kI64)), Catch::Contains("gather") && Catch::Contains("[3, 3, 4]"));
}

TEST_CASE("shape ops on 0-dim and empty tensors", "[ops][shape]") {
  const Tensor s = full({}, 5.0, kF64);
  check_equal(s.reshape({1, 1}), {5});
  check_equal(s.flatten(), {5});
  CHECK(s.flatten().sizes() == Shape{1});
  CHECK(s.unsqueeze(0).sizes() == Shape{1});
  CHECK(s.expand({2, 3}).sizes() == Shape{2, 3});
  check_equal(s.expand({2}), {5, 5});
  check_equal(stack({s, add(s, 1.0)}, 0), {5, 6});
  check_equal(index_select(s, 0, i64({0}, {1})), {5}, "index_select on a 0-dim tensor");
  CHECK(index_select(s, 0, i64({0}, {1})).dim() == 0);
  require_gradcheck([](const std::vector<Tensor>& in) { return index_select(in[0], 0, i64({0}, {1})); }, {s},
                    "index_select 0-dim");
  require_gradcheck([](const std::vector<Tensor>& in) { return gather(in[0], 0, i64({0}, {})); }, {s}, "gather 0-dim");
  REQUIRE_THROWS_WITH(index_select(s, 0, i64({1}, {1})), Catch::Contains("index_select"));
  const Tensor e = zeros({0, 3}, kF64);
  CHECK(cat({e, ones({2, 3}, kF64)}, 0).sizes() == Shape{2, 3});
  CHECK(e.reshape({3, 0}).sizes() == Shape{3, 0});
  CHECK(e.t().contiguous().sizes() == Shape{3, 0});
  CHECK(split(e, 1, 1).size() == 3);
}

TEST_CASE("dim-indexed shape ops reject 0-dim tensors with a message", "[ops][shape][errors]") {
  const Tensor s = full({}, 5.0);
  REQUIRE_THROWS_WITH(s.narrow(0, 0, 1), Catch::Contains("narrow") && Catch::Contains("0-dim"));
  REQUIRE_THROWS_WITH(s.slice(0, 0, 1), Catch::Contains("slice") && Catch::Contains("0-dim"));
  REQUIRE_THROWS_WITH(s.select(0, 0), Catch::Contains("select") && Catch::Contains("0-dim"));
  REQUIRE_THROWS_WITH(cat({s, s}, 0), Catch::Contains("cat") && Catch::Contains("0-dim"));
  REQUIRE_THROWS_WITH(split(s, 1, 0), Catch::Contains("split") && Catch::Contains("0-dim"));
  REQUIRE_THROWS_WITH(split(s, {1}, 0), Catch::Contains("split") && Catch::Contains("0-dim"));
}
