// The CUDA kernels of the elementwise, reduce, indexing, dropout and sort
// families, run on the `sim` device (the SIMT simulator), against
// the CPU backend: forward through the autograd API, backward through it,
// F32 / F16 / BF16, strided and broadcast inputs. Shapes stay small: every
// simulated thread is a fiber. The AMP and optimizer kernels are in
// test_sim_amp_optim.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/indexing/indexing.h"
#include "kernels/reduce/reduce.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using Catch::Matchers::Contains;

namespace {

using test::check_matches;
using test::random_cpu;

// Both sides compute in f32 and round once, so they differ by the f32
// accumulation order at most: a couple of ulps of the stored dtype.
double tolerance(DType t) {
  switch (t) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::F16: return 2e-3;
    case DType::BF16: return 1.6e-2;
    default: return 0;
  }
}

// A leaf on each device holding the same values.
struct Pair {
  Tensor cpu, sim;
};
Pair leaf_pair(const Tensor& values, bool requires_grad = true) {
  Pair p{values.clone().detach(), values.to(test::kCudaPath).detach()};
  if (requires_grad) {
    p.cpu.requires_grad_();
    p.sim.requires_grad_();
  }
  return p;
}

const DType kFloatTypes[] = {kF32, kF16, kBF16};

}  // namespace

TEST_CASE("to(device) moves data and gradients between cpu and sim", "[sim][to]") {
  const Tensor x = random_cpu({3, 4}, kF32, 1).requires_grad_();
  const Tensor on_sim = x.to(test::kCudaPath);
  CHECK(on_sim.device() == test::kCudaPath);
  CHECK(on_sim.to_vector() == x.to_vector());
  CHECK(x.to(kCPU).is_same(x));
  // A strided view arrives contiguous with the same values.
  const Tensor t = x.t().to(test::kCudaPath);
  CHECK(t.is_contiguous());
  CHECK(t.to(kCPU).to_vector() == x.t().contiguous().to_vector());
  // The gradient flows back to the CPU leaf.
  sum(mul(on_sim, 3.0)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == kCPU);
  for (double g : x.grad().to_vector()) CHECK(g == 3.0);
  // Half-precision bits survive the trip.
  const Tensor h = random_cpu({5}, kBF16, 2);
  CHECK(h.to(test::kCudaPath).to(kCPU).to_vector() == h.to_vector());
}

TEST_CASE("unary ops and their backward match the CPU on sim", "[sim][elementwise]") {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> fn;
    double lo, hi;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, 0.2, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 3},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.2, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, -2, 2},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.5, 2},
      {"square", [](const Tensor& x) { return square(x); }, -2, 2},
      {"relu", [](const Tensor& x) { return relu(x); }, -2, 2},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -2, 2},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }, -2, 2},
      {"silu", [](const Tensor& x) { return silu(x); }, -2, 2},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -2, 2},
      {"pow", [](const Tensor& x) { return pow(x, 2.5); }, 0.2, 2},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, -2, 2},
      {"sin", [](const Tensor& x) { return sin(x); }, -3, 3},
      {"cos", [](const Tensor& x) { return cos(x); }, -3, 3},
  };
  for (DType dtype : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype));
      // Input: a transposed (strided) view; weights for a non-trivial gradient.
      Pair x = leaf_pair(random_cpu({7, 5}, dtype, 11, c.lo, c.hi));
      const Tensor w = random_cpu({5, 7}, dtype, 12);
      const Tensor y_cpu = c.fn(x.cpu.t()), y_sim = c.fn(x.sim.t());
      check_matches(y_sim, y_cpu, tolerance(dtype), what + " forward");
      sum(mul(y_cpu, w)).backward();
      sum(mul(y_sim, w.to(test::kCudaPath))).backward();
      check_matches(x.sim.grad(), x.cpu.grad(), 2 * tolerance(dtype), what + " backward");
    }
  }
}

// Catches: the device epilogue's activation or stored pre-activation
// differing from the CPU's (the GEMM ladder's own test checks the kernels;
// this one checks linear's wiring: the Z buffer handed to the kernel and the
// backward that reads it).
TEST_CASE("linear with each fused activation matches the CPU on sim, forward and backward", "[sim][linalg]") {
  for (DType dtype : kFloatTypes) {
    for (LinearActivation act :
         {LinearActivation::None, LinearActivation::Relu, LinearActivation::Gelu, LinearActivation::GeluTanh}) {
      const std::string what = std::string(dtype_name(dtype)) + " activation " + std::to_string(static_cast<int>(act));
      Pair x = leaf_pair(random_cpu({9, 12}, dtype, 21)), w = leaf_pair(random_cpu({7, 12}, dtype, 22));
      Pair b = leaf_pair(random_cpu({7}, dtype, 23));
      const Tensor g = random_cpu({9, 7}, dtype, 24);
      const Tensor y_cpu = linear(x.cpu, w.cpu, b.cpu, act), y_sim = linear(x.sim, w.sim, b.sim, act);
      check_matches(y_sim, y_cpu, tolerance(dtype), what + " forward");
      sum(mul(y_cpu, g)).backward();
      sum(mul(y_sim, g.to(test::kCudaPath))).backward();
      check_matches(x.sim.grad(), x.cpu.grad(), 4 * tolerance(dtype), what + " d input");
      check_matches(w.sim.grad(), w.cpu.grad(), 4 * tolerance(dtype), what + " d weight");
      check_matches(b.sim.grad(), b.cpu.grad(), 4 * tolerance(dtype), what + " d bias");
    }
  }
}

TEST_CASE("the 128-bit vector path and its ragged tail", "[sim][elementwise]") {
  for (DType dtype : kFloatTypes) {
    // 1000 = 125 packs of 8 halves (or 250 of 4 floats); 1003 leaves a tail.
    for (int64_t n : {1000, 1003}) {
      const Tensor a = random_cpu({n}, dtype, 3), b = random_cpu({n}, dtype, 4);
      check_matches(add(a.to(test::kCudaPath), b.to(test::kCudaPath)), add(a, b), tolerance(dtype), "add contiguous");
      check_matches(exp(a.to(test::kCudaPath)), exp(a), tolerance(dtype), "exp contiguous");
      // An offset view is not 16-byte aligned: the scalar path must give the same.
      check_matches(mul(a.to(test::kCudaPath).narrow(0, 1, n - 1), b.to(test::kCudaPath).narrow(0, 1, n - 1)),
                    mul(a.narrow(0, 1, n - 1), b.narrow(0, 1, n - 1)), tolerance(dtype), "mul unaligned");
    }
  }
}

TEST_CASE("binary ops with broadcasting and strides match the CPU on sim", "[sim][elementwise]") {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> fn;
    bool differentiable;
  };
  const std::vector<Case> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, true},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, true},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, true},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, true},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, true},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, false},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, false},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, false},
  };
  for (DType dtype : kFloatTypes) {
    for (const Case& c : cases) {
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype));
      Pair a = leaf_pair(random_cpu({4, 3}, dtype, 21, 0.3, 2), c.differentiable);  // used as a [3, 4] view
      Pair b = leaf_pair(random_cpu({4}, dtype, 22, 0.3, 2), c.differentiable);     // broadcast over rows
      const Tensor y_cpu = c.fn(a.cpu.t(), b.cpu), y_sim = c.fn(a.sim.t(), b.sim);
      check_matches(y_sim, y_cpu, tolerance(dtype), what + " forward");
      if (!c.differentiable) continue;
      sum(y_cpu).backward();
      sum(y_sim).backward();
      check_matches(a.sim.grad(), a.cpu.grad(), 2 * tolerance(dtype), what + " grad a");
      check_matches(b.sim.grad(), b.cpu.grad(), 4 * tolerance(dtype), what + " grad b (a reduction)");
    }
  }
  // Mixed dtypes promote (f16 + bf16 -> f32); scalars broadcast.
  const Tensor h = random_cpu({6}, kF16, 5), g = random_cpu({6}, kBF16, 6);
  check_matches(add(h.to(test::kCudaPath), g.to(test::kCudaPath)), add(h, g), 1e-6, "f16 + bf16");
  check_matches(mul(h.to(test::kCudaPath), 0.3), mul(h, 0.3), tolerance(kF16), "tensor * scalar");
}

TEST_CASE("where, masked_fill, casts, copies and fills match the CPU on sim", "[sim][elementwise]") {
  for (DType dtype : kFloatTypes) {
    const std::string what(dtype_name(dtype));
    Pair a = leaf_pair(random_cpu({3, 5}, dtype, 31));
    Pair b = leaf_pair(random_cpu({5}, dtype, 32));
    const Tensor y_cpu = where(gt(a.cpu, 0.0), a.cpu, b.cpu);
    const Tensor y_sim = where(gt(a.sim, 0.0), a.sim, b.sim);
    check_matches(y_sim, y_cpu, 0, what + " where");
    sum(mul(y_cpu, y_cpu)).backward();
    sum(mul(y_sim, y_sim)).backward();
    check_matches(a.sim.grad(), a.cpu.grad(), tolerance(dtype), what + " where grad a");
    check_matches(b.sim.grad(), b.cpu.grad(), 2 * tolerance(dtype), what + " where grad b");
    check_matches(masked_fill(a.sim.detach(), lt(a.sim.detach(), 0.0), -7.0),
                  masked_fill(a.cpu.detach(), lt(a.cpu.detach(), 0.0), -7.0), 0, what + " masked_fill");
    // Casts to every dtype round once, like the CPU.
    for (DType target : {kF64, kF32, kF16, kBF16, kI64, kI32, kU8, kBool}) {
      const Tensor src = mul(a.cpu.detach(), 3.0);
      check_matches(src.to(test::kCudaPath).to(target), src.to(target), 0,
                    what + " cast to " + std::string(dtype_name(target)));
    }
  }
  // f32 -> f16 overflows to inf and underflows to subnormals/zero exactly like the CPU.
  const Tensor extremes = from_vector(std::vector<double>{70000.0, -1e-6, 1e-8, 65504.0, 3.14159}, {5});
  check_matches(extremes.to(test::kCudaPath).to(kF16), extremes.to(kF16), 0, "f16 rounding edge cases");
  check_matches(extremes.to(test::kCudaPath).to(kBF16), extremes.to(kBF16), 0, "bf16 rounding");
  // Strided copies: contiguous() of a permuted 3-D view, copy_ into a strided destination, fill_.
  const Tensor x = random_cpu({2, 3, 4}, kF32, 33);
  check_matches(x.to(test::kCudaPath).permute({2, 0, 1}).contiguous(), x.permute({2, 0, 1}).contiguous(), 0,
                "contiguous");
  Tensor dst_cpu = zeros({4, 6}), dst_sim = zeros({4, 6}, kF32, test::kCudaPath);
  copy_(dst_cpu.slice(1, 0, 6, 2), x.select(0, 0).t());
  copy_(dst_sim.slice(1, 0, 6, 2), x.to(test::kCudaPath).select(0, 0).t());
  check_matches(dst_sim, dst_cpu, 0, "copy_ into a strided view");
  fill_(dst_cpu.select(1, 1), 2.5);
  fill_(dst_sim.select(1, 1), 2.5);
  check_matches(dst_sim, dst_cpu, 0, "fill_ a column");
  check_matches(cat({x.to(test::kCudaPath), x.to(test::kCudaPath)}, 1), cat({x, x}, 1), 0, "cat");
}

TEST_CASE("reductions and their backward match the CPU on sim", "[sim][reduce]") {
  for (DType dtype : kFloatTypes) {
    const std::string what(dtype_name(dtype));
    Pair x = leaf_pair(random_cpu({4, 6, 5}, dtype, 41));
    const double tol = 4 * tolerance(dtype);
    // Reduce a permuted (strided) view over one, two and all dims.
    const Tensor pc = x.cpu.permute({2, 0, 1}), ps = x.sim.permute({2, 0, 1});
    check_matches(sum(ps, {1}), sum(pc, {1}), tol, what + " sum dim 1");
    check_matches(mean(ps, {0, 2}, true), mean(pc, {0, 2}, true), tol, what + " mean keepdim");
    check_matches(var(ps, {2}), var(pc, {2}), tol, what + " var");
    check_matches(var(ps, {2}, 0.0), var(pc, {2}, 0.0), tol, what + " var correction 0");
    check_matches(sum(ps), sum(pc), tol, what + " sum all");
    check_matches(max(ps), max(pc), 0, what + " max");
    check_matches(min(ps), min(pc), 0, what + " min");
    check_matches(argmax(ps, 1), argmax(pc, 1), 0, what + " argmax dim");
    check_matches(argmax(ps), argmax(pc), 0, what + " argmax flat");
    const auto mc = max(pc, 2, true), ms = max(ps, 2, true);
    check_matches(ms.values, mc.values, 0, what + " max values");
    check_matches(ms.indices, mc.indices, 0, what + " max indices");
    check_matches(min(ps, 0).indices, min(pc, 0).indices, 0, what + " min indices");
    // Backward through sum, mean and var.
    add(add(sum(mul(sum(pc, {1}), sum(pc, {1}))), mean(pc)), sum(var(pc, {0}))).backward();
    add(add(sum(mul(sum(ps, {1}), sum(ps, {1}))), mean(ps)), sum(var(ps, {0}))).backward();
    check_matches(x.sim.grad(), x.cpu.grad(), 2 * tol, what + " backward");
  }
  // Rows longer than a block (cols > 256), and NaN / ties in max.
  const Tensor wide = random_cpu({3, 300}, kF32, 42);
  check_matches(sum(wide.to(test::kCudaPath), {1}), sum(wide, {1}), 1e-5, "long rows");
  check_matches(argmax(wide.to(test::kCudaPath), 1), argmax(wide, 1), 0, "argmax long rows");
  const Tensor special = from_vector(std::vector<double>{1, 5, 5, 2, NAN, 3, NAN, 0, 7, 7, 7, 7}, {3, 4});
  check_matches(argmax(special.to(test::kCudaPath), 1), argmax(special, 1), 0, "argmax NaN and ties");
  check_matches(max(special.to(test::kCudaPath), 1).values, max(special, 1).values, 0, "max with NaN");
  const Tensor ints = from_vector(std::vector<int64_t>{3, -1, 4, 1, -5, 9}, {2, 3});
  check_matches(sum(ints.to(test::kCudaPath), {1}), sum(ints, {1}), 0, "integer sum");
}

// Catches, in index_add's grouping by destination: positions summed in
// another order than the index's (the CPU sums in index order; the values
// mix 1e4 and 1e-3 so f32 rounding tells orders apart), a prefix sum wrong
// past its first chunk of 1024 destinations, a hot destination (300 hits)
// losing or duplicating hits, destinations without hits losing their
// initial value, and outer/inner strides mixed up (dim 1 of [2, 1500, 3]).
// Catches, in the split reduction of a few long rows (kernels::reduce_split_chunks):
// a slice left out or counted twice, slices of one row mixed with another's,
// max/argmax picking a later slice's equal value or NaN over an earlier one's,
// var's second round not subtracting the first round's mean (the values sit
// at 1000, so E[x^2] - E[x]^2 in f32 is garbage), the mean divided by the
// slice length instead of the row length.
TEST_CASE("sum, mean and var of a few long rows split across blocks on sim match the CPU", "[sim][reduce]") {
  REQUIRE(kernels::reduce_split_chunks(1, 60000) > 1);
  REQUIRE(kernels::reduce_split_chunks(2, 30000) > 1);
  const Tensor x = add(mul(random_cpu({2, 30000}, kF32, 71), 0.01), 1000.0);
  const Tensor on_sim = x.to(test::kCudaPath);
  // check_matches' tolerance is relative: tol * (1 + |cpu|).
  check_matches(sum(on_sim), sum(x), 1e-6, "full sum");
  check_matches(mean(on_sim), mean(x), 1e-6, "full mean");
  const double spread = var(x).item_as_double();  // about 1e-4
  check_matches(var(on_sim), var(x), 1e-2 * spread, "full var");
  check_matches(sum(on_sim, {1}), sum(x, {1}), 1e-6, "two rows");
  check_matches(var(on_sim, {1}, 0), var(x, {1}, 0), 1e-2 * spread, "two rows, biased var");
  for (DType dtype : {kF16, kBF16}) {
    const Tensor half = random_cpu({1, 40000}, dtype, 72);
    check_matches(mean(half.to(test::kCudaPath)), mean(half), 1e-3, std::string(dtype_name(dtype)) + " mean");
  }
  // max/argmax: the largest value twice, in different slices (the lower index
  // wins), and a row whose NaNs sit in two slices (the first NaN wins).
  std::vector<double> values = random_cpu({2, 30000}, kF32, 73).to_vector();
  values[29000] = values[12000] = 50;
  values[29999] = -50;  // row 0's minimum, in its last slice
  values[30000 + 25000] = values[30000 + 17000] = NAN;
  const Tensor row = from_vector(values, {2, 30000}), row_sim = row.to(test::kCudaPath);
  check_matches(argmax(row_sim, 1), argmax(row, 1), 0, "argmax across slices");
  check_matches(max(row_sim, 1).values, max(row, 1).values, 0, "max across slices");
  check_matches(min(row_sim, 1).indices, min(row, 1).indices, 0, "argmin across slices");
  check_matches(argmax(row_sim.view({60000}), 0), argmax(row.view({60000}), 0), 0, "argmax of everything");
}

TEST_CASE("index_add on sim groups the index by destination and sums in index order", "[sim][indexing]") {
  std::mt19937 rng(61);
  std::uniform_int_distribution<int64_t> destination(0, 1499);
  std::vector<int64_t> ids;
  for (int j = 0; j < 2400; ++j) ids.push_back(j % 8 == 0 ? 1234 : destination(rng));
  const Tensor index = from_vector(ids, {static_cast<int64_t>(ids.size())});
  std::uniform_real_distribution<double> unit(-1, 1);
  std::vector<double> values;
  for (size_t i = 0; i < 2 * ids.size() * 3; ++i) values.push_back(unit(rng) * (i % 3 == 0 ? 1e4 : 1e-3));
  for (DType dtype : {kF32, kF16}) {
    INFO(dtype_name(dtype));
    const Tensor src = from_vector(values, {2, static_cast<int64_t>(ids.size()), 3}).to(dtype);
    const Tensor start = random_cpu({2, 1500, 3}, dtype, 62);
    const Tensor on_cpu = start.clone(), on_sim = start.to(test::kCudaPath);
    kernels::index_add(on_cpu, 1, index, src);
    kernels::index_add(on_sim, 1, index.to(test::kCudaPath), src.to(test::kCudaPath));
    CHECK(on_sim.to(kCPU).to_vector() == on_cpu.to_vector());
  }
  // No indices at all: the output keeps its values.
  const Tensor start = random_cpu({4, 2}, kF32, 63), on_sim = start.to(test::kCudaPath);
  kernels::index_add(on_sim, 0, zeros({0}, kI64, test::kCudaPath), zeros({0, 2}, kF32, test::kCudaPath));
  CHECK(on_sim.to(kCPU).to_vector() == start.to_vector());
}

TEST_CASE("index_select, embedding, gather and their backward match the CPU on sim", "[sim][indexing]") {
  const Tensor rows = from_vector(std::vector<int64_t>{3, 0, 3, 9, 1, 3, 0}, {7});  // duplicates accumulate
  for (DType dtype : kFloatTypes) {
    const std::string what(dtype_name(dtype));
    const double tol = 2 * tolerance(dtype);
    Pair w = leaf_pair(random_cpu({10, 6}, dtype, 51));
    const Tensor yc = index_select(w.cpu, 0, rows), ys = index_select(w.sim, 0, rows.to(test::kCudaPath));
    check_matches(ys, yc, 0, what + " index_select");
    const Tensor g = random_cpu({7, 6}, dtype, 52);
    sum(mul(yc, g)).backward();
    sum(mul(ys, g.to(test::kCudaPath))).backward();
    check_matches(w.sim.grad(), w.cpu.grad(), tol, what + " index_select backward (index_add)");
    // Along dim 1 of a transposed view.
    const Tensor cols = from_vector(std::vector<int64_t>{5, 5, 2}, {3});
    check_matches(index_select(w.sim.detach().t(), 1, cols.to(test::kCudaPath)),
                  index_select(w.cpu.detach().t(), 1, cols), 0, what + " index_select dim 1 strided");
    // Embedding: 2-D indices.
    Pair e = leaf_pair(random_cpu({10, 4}, dtype, 53));
    const Tensor tokens = from_vector(std::vector<int64_t>{1, 2, 1, 9, 0, 1}, {2, 3});
    const Tensor ec = embedding(e.cpu, tokens), es = embedding(e.sim, tokens.to(test::kCudaPath));
    check_matches(es, ec, 0, what + " embedding");
    sum(mul(ec, ec)).backward();
    sum(mul(es, es)).backward();
    check_matches(e.sim.grad(), e.cpu.grad(), tol, what + " embedding backward");
    // gather along dim 1 (+ backward: scatter_add), index narrower than the input.
    Pair x = leaf_pair(random_cpu({4, 5}, dtype, 54));
    const Tensor idx = from_vector(std::vector<int64_t>{0, 4, 4, 1, 1, 1, 3, 2, 0, 2, 2, 4}, {4, 3});
    const Tensor gc = gather(x.cpu, 1, idx), gs = gather(x.sim, 1, idx.to(test::kCudaPath));
    check_matches(gs, gc, 0, what + " gather");
    sum(mul(gc, gc)).backward();
    sum(mul(gs, gs)).backward();
    check_matches(x.sim.grad(), x.cpu.grad(), tol, what + " gather backward (scatter_add)");
    // gather along dim 0.
    const Tensor idx0 = from_vector(std::vector<int64_t>{3, 0, 1, 1, 2}, {1, 5});
    check_matches(gather(x.sim.detach(), 0, idx0.to(test::kCudaPath)), gather(x.cpu.detach(), 0, idx0), 0,
                  what + " gather dim 0");
  }
  // Out-of-range indices are an mt::Error on sim too (on a GPU the kernel traps instead).
  const Tensor w = random_cpu({4, 2}, kF32, 55).to(kSIM);
  CHECK_THROWS_WITH(index_select(w, 0, from_vector(std::vector<int64_t>{1, 4}, {2}, kI64, kSIM)),
                    Contains("out of range"));
  CHECK_THROWS_WITH(gather(w, 1, from_vector(std::vector<int64_t>{2}, {1, 1}, kI64, kSIM)), Contains("out of range"));
}

TEST_CASE("dropout draws the same Philox mask on sim as on the CPU", "[sim][dropout]") {
  for (DType dtype : kFloatTypes) {
    const std::string what(dtype_name(dtype));
    Pair x = leaf_pair(random_cpu({6, 11}, dtype, 61));  // 66 elements: a ragged last Philox block
    Generator gen_cpu(1234), gen_sim(1234);
    const Tensor yc = dropout(x.cpu.t(), 0.3, true, &gen_cpu);
    const Tensor ys = dropout(x.sim.t(), 0.3, true, &gen_sim);
    check_matches(ys, yc, 0, what + " dropout forward");
    const Tensor g = random_cpu({11, 6}, dtype, 62);
    sum(mul(yc, g)).backward();
    sum(mul(ys, g.to(test::kCudaPath))).backward();
    check_matches(x.sim.grad(), x.cpu.grad(), tolerance(dtype), what + " dropout backward");
    // The next call continues the stream identically on both devices.
    check_matches(dropout(x.sim.detach(), 0.5, true, &gen_sim), dropout(x.cpu.detach(), 0.5, true, &gen_cpu), 0,
                  what + " second draw");
  }
}

TEST_CASE("same-dtype copies move bits for every dtype, contiguous and strided", "[sim][elementwise]") {
  for (DType dtype : {kF64, kF32, kF16, kBF16, kI64, kI32, kU8, kBool}) {
    INFO(dtype_name(dtype));
    const Tensor x = random_cpu({5, 37}, kF32, 201, 0, 100).to(dtype);  // 185 elements: a ragged 16-byte tail
    const Tensor on_sim = x.to(test::kCudaPath);
    check_matches(on_sim.clone(), x.clone(), 0, "clone (16-byte path)");
    check_matches(on_sim.t().contiguous(), x.t().contiguous(), 0, "transpose copy");
    check_matches(on_sim.slice(1, 1, 37, 3).contiguous(), x.slice(1, 1, 37, 3).contiguous(), 0, "strided slice copy");
  }
}

// Catches: the CUDA scan or rank-sort kernels disagreeing with the CPU
// (a scan that races between rows, a rank count that writes two columns to
// one place on ties, NaN ordered differently), and the sampler reading the
// weights differently on the device.
TEST_CASE("cumsum, sort, topk and multinomial match the CPU on sim", "[sim][sort]") {
  for (DType dtype : kFloatTypes) {
    const std::string what = std::string(dtype_name(dtype));
    Pair x = leaf_pair(random_cpu({5, 9}, dtype, 31));
    const Tensor w = random_cpu({9, 5}, dtype, 32);
    const Tensor c_cpu = cumsum(x.cpu.t(), 1), c_sim = cumsum(x.sim.t(), 1);
    check_matches(c_sim, c_cpu, 4 * tolerance(dtype), what + " cumsum forward");
    sum(mul(c_cpu, w)).backward();
    sum(mul(c_sim, w.to(test::kCudaPath))).backward();
    check_matches(x.sim.grad(), x.cpu.grad(), 4 * tolerance(dtype), what + " cumsum backward");
  }
  // Ties and NaN: the stable order must be the same on both.
  const Tensor ties =
      from_vector(std::vector<double>{2, NAN, -1, 2, 0.5, -INFINITY, NAN, 2, 0.5, INFINITY, -1, 3}, {2, 6}, kF32);
  for (bool descending : {false, true}) {
    const ValuesIndices on_cpu = sort(ties, 1, descending), on_sim = sort(ties.to(test::kCudaPath), 1, descending);
    CHECK(on_sim.indices.to(kCPU).to_vector() == on_cpu.indices.to_vector());
    const Tensor y = random_cpu({3, 40}, kBF16, 33);
    const ValuesIndices t_cpu = topk(y, 7, -1, !descending), t_sim = topk(y.to(test::kCudaPath), 7, -1, !descending);
    CHECK(t_sim.indices.to(kCPU).to_vector() == t_cpu.indices.to_vector());
    CHECK(t_sim.values.to(kCPU).to_vector() == t_cpu.values.to_vector());
  }
  // The sampler: the same generator seed draws the same indices on both
  // devices (sim's rand is the CPU's Philox stream), zero weights never.
  const Tensor weights = from_vector(std::vector<double>{1, 0, 3, 6, 2, 2, 0, 1}, {2, 4}, kF32);
  Generator a(5), b(5);
  const Tensor s_cpu = multinomial(weights, 2, false, &a);
  const Tensor s_sim = multinomial(weights.to(test::kCudaPath), 2, false, &b);
  CHECK(s_sim.device() == test::kCudaPath);
  CHECK(s_sim.to(kCPU).to_vector() == s_cpu.to_vector());
  const std::vector<double> drawn = s_cpu.to_vector();  // row 0's zero weight is at 1, row 1's at 2
  CHECK((drawn[0] != 1 && drawn[1] != 1 && drawn[2] != 2 && drawn[3] != 2));
}
