// Tensor's method forms (x.pow(2).mean(-1, true)) and integer-dim overloads
// are the free functions of autograd/ops.h under PyTorch's spellings; and
// view() views whatever strides allow, as PyTorch's rule says.
#include "test_util.h"

using namespace mt;
using namespace mt::test;
using Catch::Matchers::Contains;

// Catches: a method wired to the wrong op in the table (x.exp() computing
// log, x.sub(y) computing y - x, min reaching max), and the integer dim of
// the overloads read as something other than one dim.
TEST_CASE("Tensor method forms equal the free functions", "[ops][methods]") {
  const Tensor x = uniform64({3, 4}, 0.5, 2.0, 31), y = uniform64({3, 4}, 0.5, 2.0, 32);
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector() == b.to_vector(); };
  CHECK(same(x.add(y), add(x, y)));
  CHECK(same(x.sub(y), sub(x, y)));
  CHECK(same(x.mul(y), mul(x, y)));
  CHECK(same(x.div(y), div(x, y)));
  CHECK(same(x.pow(y), pow(x, y)));
  CHECK(same(x.add(1.5), add(x, 1.5)));
  CHECK(same(x.sub(1.5), sub(x, 1.5)));
  CHECK(same(x.mul(1.5), mul(x, 1.5)));
  CHECK(same(x.div(1.5), div(x, 1.5)));
  CHECK(same(x.pow(2.0), pow(x, 2.0)));
  CHECK(same(x.maximum(y), maximum(x, y)));
  CHECK(same(x.minimum(y), minimum(x, y)));
  CHECK(same(x.matmul(y.t()), matmul(x, y.t())));
  CHECK(same(x.neg(), neg(x)));
  CHECK(same(x.exp(), exp(x)));
  CHECK(same(x.log(), log(x)));
  CHECK(same(x.sqrt(), sqrt(x)));
  CHECK(same(x.rsqrt(), rsqrt(x)));
  CHECK(same(x.neg().abs(), abs(neg(x))));
  CHECK(same(x.square(), square(x)));
  CHECK(same(x.sin(), sin(x)));
  CHECK(same(x.cos(), cos(x)));
  CHECK(same(x.tanh(), tanh(x)));
  CHECK(same(x.sigmoid(), sigmoid(x)));
  CHECK(same(x.sub(1.0).relu(), relu(sub(x, 1.0))));
  CHECK(same(x.clamp(0.8, 1.2), clamp(x, 0.8, 1.2)));
  CHECK(same(x.masked_fill(gt(x, 1.0), -1), masked_fill(x, gt(x, 1.0), -1)));
  CHECK(same(x.softmax(-1), softmax(x, -1)));
  CHECK(same(x.log_softmax(0), log_softmax(x, 0)));
  CHECK(same(x.cumsum(1), cumsum(x, 1)));
  CHECK(same(x.sum(), sum(x)));
  CHECK(same(x.mean(), mean(x)));
  CHECK(same(x.var(), var(x)));
  CHECK(same(x.max(), max(x)));
  CHECK(same(x.min(), min(x)));
  CHECK(same(x.max(1).values, max(x, 1).values));
  CHECK(same(x.min(1).indices, min(x, 1).indices));
  CHECK(same(x.argmax(), argmax(x)));
  CHECK(same(x.argmax(0, true), argmax(x, 0, true)));
  CHECK(same(x.sort(1, true).values, sort(x, 1, true).values));
  CHECK(same(x.argsort(0), argsort(x, 0)));
  CHECK(same(x.topk(2).values, topk(x, 2).values));
}

// Catches: x.sum(-1) or mt::mean(x, -1, true) reducing the wrong dim,
// keepdim dropped, and braces read as one dim ({} must stay every dim).
TEST_CASE("reductions take an integer dim, braces stay a list of dims", "[ops][methods]") {
  const Tensor x = randn64({2, 3, 4}, 33);
  CHECK(x.sum(-1).to_vector() == sum(x, Shape{2}).to_vector());
  CHECK(x.mean(1, true).sizes() == Shape{2, 1, 4});
  CHECK(mean(x, -1, true).to_vector() == mean(x, Shape{2}, true).to_vector());
  CHECK(var(x, 0).to_vector() == var(x, Shape{0}).to_vector());
  CHECK(x.var(1, 0.0, true).to_vector() == var(x, Shape{1}, 0.0, true).to_vector());
  CHECK(sum(x, {}).dim() == 0);  // every dim, as before
  CHECK(x.sum({0, 2}).sizes() == Shape{3});
  // The LayerNorm-by-hand line a PyTorch user writes.
  const Tensor ms = x.pow(2).mean(-1, true);
  CHECK(ms.sizes() == Shape{2, 3, 1});
  check_close(ms, mean(square(x), Shape{-1}, true).to_vector(), kF64Tol);
  // They stay differentiable.
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0].pow(2).mean(-1, true).rsqrt(); }, {x},
                    "method chain");
}

// Catches: view refusing a stride-compatible non-contiguous tensor (nanoGPT's
// q.view(B, T, H, D) after split), or viewing one it cannot (a transpose
// flattened), view strides that read the wrong elements, and reshape copying
// where it could view.
TEST_CASE("view follows PyTorch's stride rule", "[ops][methods][shape]") {
  const Tensor qkv = randn64({2, 5, 3 * 8}, 34);  // [B, T, 3C]
  const std::vector<Tensor> parts = split(qkv, 8, 2);
  const Tensor q = parts[0];  // [2, 5, 8], row stride 24: not contiguous
  REQUIRE_FALSE(q.is_contiguous());
  const Tensor heads = q.view({2, 5, 2, 4});
  CHECK(heads.storage() == qkv.storage());
  CHECK(heads.to_vector() == q.contiguous().view({2, 5, 2, 4}).to_vector());
  // Merging the split dims back, and a size-1 dim anywhere.
  CHECK(heads.view({2, 5, 8}).to_vector() == q.to_vector());
  CHECK(q.view({2, 5, 1, 8}).to_vector() == q.to_vector());
  CHECK(q.view({10, 8}).strides() == Shape{24, 1});  // B and T merge: 5 * 24 = stride of B
  // Rows 24 apart cannot merge with the 8 columns: PyTorch refuses too.
  CHECK_THROWS_WITH(q.view({2, 40}), Contains("cannot be viewed as [2, 40]") && Contains("reshape"));
  CHECK_THROWS_WITH(qkv.transpose(1, 2).view({2, 120}), Contains("without a copy"));
  // reshape views wherever view can (GPT's split_heads of a qkv slice: a
  // copy per q, k and v before), copies only when view cannot, and the
  // gradient of a view of a strided tensor flows.
  const Tensor reshaped = q.reshape({2, 5, 2, 4});
  CHECK(reshaped.storage() == qkv.storage());
  CHECK(reshaped.to_vector() == heads.to_vector());
  CHECK(q.reshape({2, 40}).storage() != qkv.storage());
  CHECK(q.reshape({2, 40}).to_vector() == q.contiguous().view({2, 40}).to_vector());
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return split(in[0], 8, 2)[2].reshape({2, 5, 2, 4}) * 3.0;
      },
      {qkv}, "reshape of a split");
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return split(in[0], 8, 2)[1].view({2, 5, 2, 4});
      },
      {qkv}, "view of a split");
  // Strided views that keep every dim's stride rule: a transposed tensor viewed with a size-1 dim added.
  const Tensor t = randn64({3, 4}, 35).t();
  CHECK(t.view({4, 1, 3}).to_vector() == t.contiguous().view({4, 1, 3}).to_vector());
}
