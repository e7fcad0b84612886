// The tape and the backward engine: ordering, accumulation, guards, freed
// graphs, saved-tensor versions, dtypes recorded at forward time.
#include <catch2/catch.hpp>

#include "mixtape.h"

using namespace mt;
using Catch::Contains;

static Tensor vec(std::vector<double> v, DType dtype = kF64) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n}, dtype);
}

TEST_CASE("backward accumulates into leaves through a shared subexpression", "[autograd]") {
  Tensor x = vec({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = mul(x, x);               // x^2
  Tensor z = sum(add(y, mul(y, x)));  // sum(x^2 + x^3)
  z.backward();
  const auto g = x.grad().to_vector();  // 2x + 3x^2
  CHECK(g[0] == Approx(5.0));
  CHECK(g[1] == Approx(16.0));
  CHECK(g[2] == Approx(33.0));
  const Tensor grad_before = x.grad();
  sum(x).backward();  // a second graph accumulates into the same .grad tensor, in place
  CHECK(x.grad().to_vector()[0] == Approx(6.0));
  CHECK(x.grad().is_same(grad_before));
}

TEST_CASE("nodes run in reverse record order and leaves without requires_grad get nothing", "[autograd]") {
  Tensor a = vec({2.0}).requires_grad_();
  Tensor b = vec({3.0});
  Tensor c = mul(a, b);
  Tensor d = mul(c, c);          // (ab)^2
  Tensor e = add(d, mul(c, a));  // (ab)^2 + a^2 b
  CHECK(c.grad_fn()->sequence_nr() < d.grad_fn()->sequence_nr());
  sum(e).backward();
  CHECK(a.grad().item<double>() == Approx(2 * 2.0 * 9.0 + 2 * 2.0 * 3.0));  // 2ab^2 + 2ab
  CHECK(!b.grad().defined());
  CHECK(!c.is_leaf());
  CHECK(a.is_leaf());
}

TEST_CASE("a second backward through a freed graph is an error, retain_graph keeps it", "[autograd]") {
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  Tensor loss = sum(exp(x));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();  // allowed: the graph was retained
  CHECK(x.grad().to_vector()[0] == Approx(2 * std::exp(1.0)));
  REQUIRE_THROWS_WITH(loss.backward(),
                      Contains("backward through the graph a second time") && Contains("retain_graph"));
}

TEST_CASE("backward on a non-scalar needs a gradient of the output's shape", "[autograd]") {
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  Tensor y = mul(x, 3.0);
  REQUIRE_THROWS_WITH(y.backward(), Contains("only be implied for a scalar") && Contains("[2]"));
  REQUIRE_THROWS_WITH(y.backward(vec({1.0})), Contains("does not match output shape [2]"));
  y.backward(vec({1.0, 10.0}));
  CHECK(x.grad().to_vector() == std::vector<double>{3.0, 30.0});
  REQUIRE_THROWS_WITH(sum(vec({1.0})).backward(), Contains("does not require grad"));
}

TEST_CASE("NoGradGuard and InferenceMode record nothing, detach cuts the graph", "[autograd]") {
  Tensor x = vec({1.0}).requires_grad_();
  {
    NoGradGuard guard;
    CHECK(!GradMode::is_enabled());
    const Tensor y = mul(x, 2.0);
    CHECK(!y.grad_fn());
    CHECK(!y.requires_grad());
    {
      EnableGradGuard enable;
      CHECK(mul(x, 2.0).grad_fn());
    }
  }
  CHECK(GradMode::is_enabled());
  {
    InferenceMode inference;
    CHECK(InferenceMode::is_enabled());
    CHECK(!mul(x, 2.0).grad_fn());
  }
  CHECK(!InferenceMode::is_enabled());
  const Tensor d = mul(x, 2.0).detach();
  CHECK(!d.requires_grad());
  CHECK(!d.grad_fn());
}

TEST_CASE("modifying a saved tensor in place before backward is caught", "[autograd]") {
  Tensor w = vec({1.0, 2.0}).requires_grad_();
  Tensor x = vec({3.0, 4.0});
  Tensor y = sum(mul(w, x));  // saves x
  copy_(x, vec({0.0, 0.0}));
  REQUIRE_THROWS_WITH(y.backward(), Contains("modified in place"));
}

TEST_CASE("in-place writes into tensors in the graph need NoGradGuard", "[autograd]") {
  Tensor w = vec({1.0}).requires_grad_();
  REQUIRE_THROWS_WITH(copy_(w, vec({2.0})), Contains("NoGradGuard"));
  NoGradGuard guard;
  copy_(w, vec({2.0}));
  CHECK(w.item<double>() == 2.0);
}

TEST_CASE("gradients come back in the dtype each input had at forward time", "[autograd]") {
  // An f32 master weight used in f16: its gradient is f32, cast back by the cast's backward.
  Tensor w = from_vector(std::vector<double>{0.5, -1.0}, {2}, kF32).requires_grad_();
  Tensor x = from_vector(std::vector<double>{2.0, 3.0}, {2}, kF16);
  Tensor y = mul(w.to(kF16), x);
  CHECK(y.dtype() == kF16);
  CHECK(y.grad_fn()->inputs()[0].dtype == kF16);
  sum(y.to(kF32)).backward();
  CHECK(w.grad().dtype() == kF32);
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 3.0});
}

TEST_CASE("f16 gradients underflow exactly as on a GPU", "[autograd]") {
  // The seed of AMP's loss scaling: 1e-8 is below half the smallest f16 subnormal.
  Tensor w = from_vector(std::vector<double>{1.0}, {1}, kF32).requires_grad_();
  Tensor loss = sum(mul(w.to(kF16), 1e-8).to(kF32));
  loss.backward();
  CHECK(w.grad().item<double>() == 0.0);  // the f16 gradient flushed to zero
  w.set_grad(Tensor());
  sum(mul(mul(w.to(kF16), 1e-8).to(kF32), 65536.0)).backward();  // a scaled loss keeps it
  CHECK(w.grad().item<double>() > 0.0);
}

TEST_CASE("gradcheck passes a correct gradient and reports a wrong one", "[autograd][gradcheck]") {
  Generator gen(5);
  const Tensor x = randn({3, 2}, kF64, kCPU, &gen).requires_grad_();
  const GradcheckResult good = gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {x});
  CHECK(good.ok);
  // A deliberately wrong backward: detach the second factor of x*x so d/dx is x, not 2x.
  const GradcheckResult bad = gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[0].detach()); }, {x});
  CHECK(!bad.ok);
  CHECK_THAT(bad.message, Contains("analytic") && Contains("numeric"));
}

// The bug: a hook that fires on the first accumulation into a leaf used twice
// (weight tying) would start all-reducing a gradient that is still missing a
// contribution; one that never fires would hang data parallel training.
TEST_CASE("a post-accumulate-grad hook runs once per backward, after the leaf's last contribution",
          "[autograd][hooks]") {
  Tensor w = vec({2.0}).requires_grad_();
  Tensor unused = vec({5.0}).requires_grad_();
  std::vector<double> seen;
  const uint64_t h = autograd::register_post_accumulate_grad_hook(
      w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().item<double>()); });
  int unused_calls = 0;
  const uint64_t h2 = autograd::register_post_accumulate_grad_hook(unused, [&](const Tensor&) { ++unused_calls; });
  Tensor x = vec({3.0});
  Tensor first = mul(w, x);                    // w used early ...
  Tensor late = mul(exp(mul(first, 0.1)), w);  // ... and late: two contributions
  sum(add(late, first)).backward();
  REQUIRE(seen.size() == 1);
  const double e = std::exp(0.6);
  CHECK(seen[0] == Approx(0.3 * e * 2.0 + e + 3.0));  // the whole gradient, not a part
  CHECK(unused_calls == 0);                           // no gradient reached it: no call
  sum(mul(w, w)).backward();
  REQUIRE(seen.size() == 2);  // once more, with the accumulated .grad
  CHECK(seen[1] == Approx(seen[0] + 4.0));
  autograd::remove_hook(h);
  autograd::remove_hook(h2);
  sum(w).backward();
  CHECK(seen.size() == 2);
}

TEST_CASE("queue_callback runs at the end of the outermost backward, after every hook", "[autograd][hooks]") {
  Tensor a = vec({1.0, 2.0}).requires_grad_();
  Tensor b = vec({3.0, 4.0}).requires_grad_();
  std::vector<std::string> events;
  std::vector<uint64_t> handles;
  for (auto [t, name] : {std::pair{a, "a"}, std::pair{b, "b"}}) {
    handles.push_back(
        autograd::register_post_accumulate_grad_hook(t, [&events, name = std::string(name)](const Tensor&) {
          events.push_back(name);
          if (events.size() == 1) autograd::queue_callback([&events] { events.push_back("end"); });
        }));
  }
  // a's gradient comes from a checkpointed segment: a nested backward, whose end is not the end.
  Tensor y = checkpoint([](const std::vector<Tensor>& t) { return mul(t[0], t[0]); }, {a});
  sum(add(y, mul(b, 2.0))).backward();
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Contains("only inside a backward"));
  for (uint64_t h : handles) autograd::remove_hook(h);
}

// The bugs: backward that still allocates a fresh .grad (DDP's
// gradient_as_bucket_view would then copy every gradient twice), one that
// overwrites the destination on a second contribution instead of adding to
// it, or one that writes into a destination of the wrong shape.
TEST_CASE("a gradient destination receives a leaf's first contribution, and later ones add to it",
          "[autograd][hooks]") {
  Tensor w = vec({2.0, 3.0}).requires_grad_();
  Tensor bucket = full({5}, -7.0, kF64);  // w's gradient is to live at [1, 3)
  int asked = 0;
  const uint64_t h = autograd::register_grad_destination(w, [&](const Tensor&) {
    ++asked;
    return bucket.narrow(0, 1, 2);
  });
  CHECK_THROWS_WITH(autograd::register_grad_destination(w, [&](const Tensor&) { return Tensor(); }),
                    Contains("already has a gradient destination"));
  Tensor x = vec({10.0, 20.0});
  Tensor late = mul(exp(mul(w, 0.0)), w);  // w reaches the loss three ways: three contributions (x, 1, 0)
  sum(add(mul(w, x), late)).backward();
  CHECK(asked == 1);
  CHECK(w.grad().storage() == bucket.storage());
  CHECK(bucket.to_vector() == std::vector<double>{-7.0, 11.0, 21.0, -7.0, -7.0});
  sum(mul(w, x)).backward();  // accumulates in place, asks no more
  CHECK(asked == 1);
  CHECK(bucket.to_vector() == std::vector<double>{-7.0, 21.0, 41.0, -7.0, -7.0});
  w.impl()->grad.reset();  // zero_grad(set_to_none): the next backward asks again
  sum(w).backward();
  CHECK(asked == 2);
  CHECK(bucket.to_vector() == std::vector<double>{-7.0, 1.0, 1.0, -7.0, -7.0});
  autograd::remove_hook(h);
  w.impl()->grad.reset();
  sum(w).backward();
  CHECK(w.grad().storage() != bucket.storage());  // removed: a fresh tensor again

  Tensor v = vec({1.0, 2.0}).requires_grad_();
  const uint64_t wrong = autograd::register_grad_destination(v, [&](const Tensor&) { return bucket.narrow(0, 0, 3); });
  CHECK_THROWS_WITH(sum(v).backward(), Contains("gradient destination must be contiguous and match its leaf"));
  autograd::remove_hook(wrong);
}

// The bug FSDP would meet: a pre-node hook that runs after the node's
// backward (the unit's parameters gathered too late) or that misses nodes.
// Each node is seen just before its backward function runs (a custom
// function logs when it runs), and the sequence numbers read around a
// stretch of forward bound the nodes it recorded.
namespace {
std::vector<std::string>* event_log = nullptr;
struct LoggedSquare : autograd::Function<LoggedSquare> {
  static constexpr const char* name = "logged_square";
  static Tensor forward(autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    return mul(in[0], in[0]);
  }
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx, const Tensor& g) {
    event_log->push_back("backward");
    return {mul(mul(g, ctx.saved()[0]), 2.0)};
  }
};
}  // namespace

TEST_CASE("a pre-node hook sees each node before it runs, numbered as recorded", "[autograd][hooks]") {
  std::vector<std::string> events;
  event_log = &events;
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  const uint64_t first = autograd::next_sequence_nr();
  Tensor y = LoggedSquare::apply({x});
  const uint64_t middle = autograd::next_sequence_nr();
  Tensor z = sum(exp(y));
  std::vector<uint64_t> seen;
  const uint64_t h = autograd::register_pre_node_hook([&](const autograd::Node& n) {
    seen.push_back(n.sequence_nr());
    if (n.sequence_nr() < middle) events.push_back("hook");
  });
  z.backward();
  autograd::remove_hook(h);
  REQUIRE(seen.size() == 3);  // sum, exp, logged_square: in reverse record order
  CHECK(seen[0] > seen[1]);
  CHECK(seen[1] > seen[2]);
  CHECK(seen[2] >= first);
  CHECK(seen[2] < middle);
  CHECK(events == std::vector<std::string>{"hook", "backward"});
  z = sum(exp(mul(x, x)));
  z.backward();
  CHECK(seen.size() == 3);  // removed: not called again
  event_log = nullptr;
}

// A slice's node tells the engine where its gradient lies (autograd::
// GradientRegion), and the engine adds the part into its input's pending
// gradient in place. Catches: adding in place into a gradient the engine
// did not make (sum's backward hands back a broadcast view of one value, so
// an in-place add there writes every element at once), a part landing in
// the wrong region, a part added twice or lost when its tensor has two
// consumers, and the leaf case (no pending gradient: the slice's own
// backward) going wrong.
TEST_CASE("split's parts add their gradients where they lie, beside other uses of the input", "[autograd]") {
  const std::vector<double> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const Tensor w = from_vector(std::vector<double>{2, -1, 0.5, 3, 1.5, -2}, {3, 2});
  for (const bool sum_first : {true, false}) {
    for (const bool leaf : {false, true}) {
      INFO((sum_first ? "sum(x) recorded before the split" : "sum(x) recorded after the split")
           << (leaf ? ", x a leaf" : ", x from a node"));
      const Tensor a = from_vector(values, {3, 4}).requires_grad_();
      const Tensor x = leaf ? a : mul(a, 1.0);
      Tensor loss = sum_first ? sum(x) : Tensor();
      const std::vector<Tensor> parts = split(x, 2, 1);  // columns 0-1 and 2-3
      // part 0 twice (its node gets a summed gradient), part 1 once.
      const Tensor used = add(sum(mul(parts[0], w)), add(sum(parts[0]), sum(mul(parts[1], mul(w, 3.0)))));
      loss = loss.defined() ? add(loss, used) : add(used, sum(x));
      loss.backward();
      std::vector<double> want(12);
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) {
          const double wv = w.to_vector()[static_cast<size_t>(r * 2 + c % 2)];
          want[static_cast<size_t>(r * 4 + c)] = 1.0 + (c < 2 ? wv + 1.0 : 3.0 * wv);
        }
      }
      CHECK(a.grad().to_vector() == want);
    }
  }
}

// The region path keeps what the slice's own backward gave: the same
// gradients through a retained graph run twice, and parts whose tensor
// has no other consumer (the first part allocates the zeros).
TEST_CASE("a split's gradient accumulates over two backward passes of a retained graph", "[autograd]") {
  const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {6}).requires_grad_();
  const std::vector<Tensor> parts = split(mul(a, 2.0), 2, 0);
  const Tensor loss = add(sum(mul(parts[0], parts[0])), sum(parts[2]));  // part 1 unused
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK(a.grad().to_vector() == std::vector<double>{2 * 8 * 1, 2 * 8 * 2, 0, 0, 4, 4});  // twice 8a, twice 2
}
