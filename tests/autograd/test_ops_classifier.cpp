// linear_cross_entropy (the fused vocabulary head) against the unfused pair
// cross_entropy(linear(hidden, weight), target): values and gradients in f64
// (and gradcheck), chunked against whole, under autocast with a loss scale on
// the CPU and the CUDA path, what it keeps for backward, and its errors.
#include <cmath>
#include <vector>

#include "test_util.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using namespace mt::test;

namespace {

struct Head {
  Tensor hidden, weight, target;
};

// N rows of width C over V classes; targets include ignore_index (-100) rows.
Head make_head(int64_t n, int64_t c, int64_t v, DType dtype, Device device, unsigned seed, int64_t ignored = -100) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 5 == 3 ? ignored : (i * 7 + seed) % v;
  return {random_tensor({n, c}, dtype, device, seed, -2, 2).requires_grad_(),
          random_tensor({v, c}, dtype, device, seed + 1, -1, 1).requires_grad_(),
          from_vector(labels, {n}, kI64, device)};
}

struct Grads {
  Tensor loss, hidden, weight;
};

Grads backward_of(const Head& h, const Tensor& loss, double upstream) {
  loss.backward(full({}, upstream, loss.dtype(), loss.device()));
  Grads g{loss.detach(), h.hidden.grad(), h.weight.grad()};
  h.hidden.set_grad(Tensor());
  h.weight.set_grad(Tensor());
  return g;
}

Grads fused(const Head& h, const CrossEntropyOptions& o, int64_t chunk, double upstream = 1.0) {
  return backward_of(h, linear_cross_entropy(h.hidden, h.weight, h.target, o, chunk), upstream);
}

Grads unfused(const Head& h, const CrossEntropyOptions& o, double upstream = 1.0) {
  return backward_of(h, cross_entropy(linear(h.hidden, h.weight), h.target, o), upstream);
}

void check_same(const Grads& got, const Grads& want, double tol, const std::string& what) {
  check_close(got.loss.to(kCPU).to(kF64), want.loss.to(kCPU).to(kF64), tol, what + ": loss");
  check_close(got.hidden.to(kCPU).to(kF64), want.hidden.to(kCPU).to(kF64), tol, what + ": grad hidden");
  check_close(got.weight.to(kCPU).to(kF64), want.weight.to(kCPU).to(kF64), tol, what + ": grad weight");
}

}  // namespace

// Catches: a chunk's rows written to another chunk's place, the last partial
// chunk dropped, the mean divided by N instead of the non-ignored count,
// label smoothing or ignore_index lost on the way to the kernels, grad
// weight keeping only the last chunk, and the upstream gradient not applied.
TEST_CASE("linear_cross_entropy equals cross_entropy(linear(...)) in f64, in chunks, with gradcheck",
          "[ops][classifier]") {
  for (const auto& [name, options] :
       std::vector<std::pair<const char*, CrossEntropyOptions>>{{"mean", {}},
                                                                {"sum", {.reduction = Reduction::Sum}},
                                                                {"label smoothing", {.label_smoothing = 0.1}},
                                                                {"ignore_index 2", {.ignore_index = 2}}}) {
    INFO(name);
    const Head h = make_head(11, 6, 9, kF64, kCPU, 1, options.ignore_index);
    const Grads want = unfused(h, options, 3.0);
    for (const int64_t chunk : {0, 1, 4, 11, 50}) {
      check_same(fused(h, options, chunk, 3.0), want, 1e-12, std::string(name) + ", chunk " + std::to_string(chunk));
    }
    require_gradcheck([target = h.target, o = options](
                          const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], target, o, 4); },
                      {h.hidden.detach(), h.weight.detach()}, name);
  }
}

// Catches: the loss scale applied after the logits' gradient is rounded to
// f16 (small gradients flush to zero, so grad weight differs from the
// unfused pair's), the loss computed from f16 logits without widening, and
// the chunks' grad weight summed in f16. One chunk is exactly the unfused pair.
TEST_CASE("linear_cross_entropy under autocast with a loss scale matches the unfused pair", "[ops][classifier][amp]") {
  for (const auto& [device, low] : {std::pair{kCPU, kBF16}, std::pair{kCudaPath, kF16}}) {
    INFO(device.str());
    const Head h = make_head(40, 16, 300, kF32, device, 2);
    const CrossEntropyOptions options{.label_smoothing = 0.05};
    const amp::Autocast autocast(device, low);
    const Grads want = unfused(h, options, 65536.0);
    check_same(fused(h, options, 40, 65536.0), want, 0.0, "one chunk");
    // In chunks, loss and grad hidden are still the unfused pair's; grad weight
    // rounds each chunk's partial sum once, an error of about one unit of the
    // dtype's precision relative to the largest gradient.
    const Grads chunked = fused(h, options, 7, 65536.0);
    check_same({chunked.loss, chunked.hidden, want.weight}, want, 0.0, "chunks of 7");
    const double eps = low == kF16 ? 0x1p-10 : 0x1p-7;
    CHECK(relative_difference(chunked.weight, want.weight) <= eps);
  }
}

// Catches: keeping the [N, V] logits (or their f32 copy) for backward, which
// is what the fused head exists to avoid.
TEST_CASE("linear_cross_entropy keeps O(N + V) for backward where the unfused pair keeps the logits",
          "[ops][classifier][saved]") {
  const int64_t n = 64, c = 8, v = 2048;
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i * 31 % v;
  const Tensor target = from_vector(labels, {n}, kI64);
  const int64_t fused_bytes = saved_bytes(kCPU, {{n, c}, {v, c}}, [&](const std::vector<Tensor>& x) {
    return linear_cross_entropy(x[0], x[1], target, {}, 16);
  });
  const int64_t unfused_bytes = saved_bytes(
      kCPU, {{n, c}, {v, c}}, [&](const std::vector<Tensor>& x) { return cross_entropy(linear(x[0], x[1]), target); });
  const int64_t inputs = (n * c + v * c) * 4;
  CHECK(unfused_bytes >= n * v * 4);
  CHECK(fused_bytes <= inputs + n * 2 * 4 + 256);  // + the row statistics and the count
}

// Catches: reduction none silently treated as mean, shapes not checked
// before the GEMM (a confusing matmul error or a crash), a non-index target.
TEST_CASE("linear_cross_entropy refuses what it cannot compute", "[ops][classifier][errors]") {
  const Head h = make_head(4, 3, 5, kF32, kCPU, 3);
  CHECK_THROWS_WITH(linear_cross_entropy(h.hidden, h.weight, h.target, {.reduction = Reduction::None}),
                    Catch::Contains("reduction none is not fused"));
  CHECK_THROWS_WITH(linear_cross_entropy(h.hidden, h.weight.narrow(1, 0, 2), h.target),
                    Catch::Contains("expected hidden [N, C] and weight [V, C]"));
  CHECK_THROWS_WITH(linear_cross_entropy(h.hidden, h.weight, h.target.narrow(0, 0, 3)),
                    Catch::Contains("does not match hidden"));
  CHECK_THROWS_WITH(linear_cross_entropy(h.hidden, h.weight, h.target.to(kF32)), Catch::Contains("integer tensor"));
  CHECK_THROWS_WITH(linear_cross_entropy(h.hidden, h.weight, h.target, {}, -1), Catch::Contains("chunk_rows"));
}
