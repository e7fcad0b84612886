// FP8 Linear layers (autograd/fp8.h: fp8::linear) under each recipe
// (amp/fp8_recipe.h): the forward and both gradients against f64 products
// of the operands quantized as the recipe says (E4M3 x and W, E5M2
// gradients under HYBRID; tiles and blocks under block scaling), on the CPU
// and the CUDA path; the region that routes nn::Linear to it.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "autograd/dtype_report.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"
#include "nn/layers.h"

using namespace mt;
using fp8::Format;
using fp8::ScaleLayout;

namespace {

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Matrix dequantized(const fp8::Fp8Tensor& q) {
  return {q.sizes()[0], q.sizes()[1], fp8::dequantize(q, kF64).to_vector()};
}

// a @ b^T in f64, with each element's sum of |terms| (what f32 accumulation error scales with).
Matrix matmul_nt(const Matrix& a, const Matrix& b, Matrix* magnitude) {
  Matrix out{a.rows, b.rows, std::vector<double>(static_cast<size_t>(a.rows * b.rows))};
  if (magnitude != nullptr) *magnitude = out;
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t j = 0; j < b.rows; ++j) {
      double acc = 0, abs = 0;
      for (int64_t k = 0; k < a.cols; ++k) {
        acc += a.at(i, k) * b.at(j, k);
        abs += std::fabs(a.at(i, k) * b.at(j, k));
      }
      out.v[static_cast<size_t>(i * b.rows + j)] = acc;
      if (magnitude != nullptr) magnitude->v[static_cast<size_t>(i * b.rows + j)] = abs;
    }
  }
  return out;
}

Matrix transposed(const Matrix& m) {
  Matrix t{m.cols, m.rows, std::vector<double>(m.v.size())};
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) t.v[static_cast<size_t>(c * m.rows + r)] = m.at(r, c);
  }
  return t;
}

// got within f32 accumulation (n * u * sum |terms|) of want.
void check_close(const std::vector<double>& got, const Matrix& want, const Matrix& magnitude, int64_t n_terms) {
  REQUIRE(got.size() == want.v.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound =
        static_cast<double>(n_terms + 3) * 0x1p-24 * (magnitude.v[i] + 1e-30) + 0x1p-24 * std::fabs(want.v[i]);
    if (!(std::fabs(got[i] - want.v[i]) <= bound) && bad++ < 3) {
      FAIL_CHECK("element " << i << ": got " << got[i] << ", want " << want.v[i] << " (bound " << bound << ")");
    }
  }
  CHECK(bad == 0);
}

// How the recipe under test quantizes each operand, written from the recipe's
// definition (not from amp/fp8_recipe.cpp).
struct Quantizers {
  amp::Fp8RecipeKind kind;
  fp8::Fp8Tensor input(const Tensor& x) const {
    if (kind == amp::Fp8RecipeKind::Block) return fp8::quantize(x, Format::E4M3, ScaleLayout::Tiles1x128);
    if (kind == amp::Fp8RecipeKind::Delayed)
      return fp8::quantize_with_scale(x, Format::E4M3, ones({}, kF32, x.device()));
    return fp8::quantize(x, Format::E4M3);
  }
  fp8::Fp8Tensor weight(const Tensor& w) const {
    if (kind == amp::Fp8RecipeKind::Block) return fp8::quantize(w, Format::E4M3, ScaleLayout::Blocks128x128);
    if (kind == amp::Fp8RecipeKind::Delayed)
      return fp8::quantize_with_scale(w, Format::E4M3, ones({}, kF32, w.device()));
    return fp8::quantize(w, Format::E4M3);
  }
  fp8::Fp8Tensor grad(const Tensor& g) const {
    if (kind == amp::Fp8RecipeKind::Block) return fp8::quantize(g, Format::E4M3, ScaleLayout::Tiles1x128);
    if (kind == amp::Fp8RecipeKind::Delayed)
      return fp8::quantize_with_scale(g, Format::E5M2, ones({}, kF32, g.device()));
    return fp8::quantize(g, Format::E5M2);
  }
};

// Magnitudes that differ by row and by 128-wide column group, so every
// scale group has its own scale.
Tensor graded(int64_t rows, int64_t cols, Device device, unsigned seed, double base) {
  std::vector<double> v = test::random_tensor({rows, cols}, kF64, kCPU, seed).to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] *= base * std::ldexp(1.0, int((c / 128) * 2 + r % 3) - 2);
  }
  return from_vector(v, {rows, cols}, kF32, device);
}

amp::Fp8Recipe recipe_of(amp::Fp8RecipeKind kind) {
  if (kind == amp::Fp8RecipeKind::Delayed) return amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0});
  if (kind == amp::Fp8RecipeKind::Block) return amp::Fp8Recipe::block();
  return amp::Fp8Recipe::current();
}

}  // namespace

TEST_CASE("fp8 linear: forward and both gradients, per recipe (bug: E5M2 used for the weight)", "[fp8][sim]") {
  const int64_t m = 6, k = 260, n = 5;  // K: two whole 128-groups and a ragged third
  for (Device device : {kCPU, test::kCudaPath}) {
    for (amp::Fp8RecipeKind kind :
         {amp::Fp8RecipeKind::Current, amp::Fp8RecipeKind::Delayed, amp::Fp8RecipeKind::Block}) {
      INFO(device.str() << " " << recipe_of(kind).name());
      amp::Fp8State state(recipe_of(kind));
      const Tensor x = graded(m, k, device, 1, 4.0).requires_grad_();
      const Tensor w = graded(n, k, device, 2, 0.05).requires_grad_();
      const Tensor b = test::random_tensor({n}, kF32, device, 3).requires_grad_();
      const Tensor r = graded(m, n, device, 4, 1e-3);  // the upstream gradient, small like real ones
      const Tensor y = fp8::linear(x, w, b, *state.scaling_for(w));
      CHECK(y.dtype() == kF32);
      // The saved FP8 input must be read with the scale it was quantized
      // with, even when the scales move before backward runs.
      state.update();
      sum(mul(y, r)).backward();

      const Quantizers q{kind};
      Matrix magnitude;
      Matrix want_y = matmul_nt(dequantized(q.input(x.detach())), dequantized(q.weight(w.detach())), &magnitude);
      const std::vector<double> bias = b.to_vector();
      for (int64_t i = 0; i < m * n; ++i) want_y.v[static_cast<size_t>(i)] += bias[static_cast<size_t>(i % n)];
      check_close(y.to_vector(), want_y, magnitude, k);

      const Matrix qg = dequantized(q.grad(r));  // along N
      const Matrix want_gx = matmul_nt(qg, transposed(dequantized(q.weight(w.detach()))), &magnitude);
      check_close(x.grad().to_vector(), want_gx, magnitude, n);
      const Matrix qg_m = dequantized(q.grad(r.t().contiguous()));  // along M
      const Matrix qx_m = dequantized(q.input(x.detach().t().contiguous()));
      const Matrix want_gw = matmul_nt(qg_m, qx_m, &magnitude);
      check_close(w.grad().to_vector(), want_gw, magnitude, m);
      CHECK(w.grad().dtype() == kF32);
      const std::vector<double> r_v = r.to_vector(), gb = b.grad().to_vector();
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t i = 0; i < m; ++i) want += r_v[static_cast<size_t>(i * n + j)];
        CHECK(gb[static_cast<size_t>(j)] == Approx(want).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("fp8 region: nn::Linear runs FP8 inside it unless kept (bug: a kept head quantized)", "[fp8]") {
  Generator gen(5);
  nn::Linear body(16, 8), head(8, 4);
  amp::Fp8State state(amp::Fp8Recipe::current());
  state.keep_high_precision(head);
  const Tensor x = randn({3, 16}, kF32, kCPU, &gen);
  {
    amp::Autocast autocast(kCPU, kBF16);
    amp::Fp8Autocast region(state);
    const Tensor h = body.forward(x);
    CHECK(h.grad_fn()->name() == std::string("fp8_linear"));
    CHECK(h.dtype() == kBF16);  // the autocast dtype, from an f32 input
    const Tensor out = head.forward(h);
    CHECK(out.grad_fn()->name() == std::string("linear"));
    sum(out.to(kF32)).backward();
  }
  CHECK(state.linears() == 1);
  CHECK(body.weight.grad().dtype() == kF32);  // straight from the FP8 GEMM into the f32 master's grad
  CHECK(fp8::active_region() == nullptr);
  CHECK(body.forward(x).grad_fn()->name() == std::string("linear"));  // outside the region
}

// Catches linear_cross_entropy's forward quantizing the head inside the
// region (its backward recomputes the logits outside it) and a weight made
// in the step keying fresh delayed state every step, never freed.
TEST_CASE("fp8 region: a fused head and a computed weight stay high precision (bug: state every step)", "[fp8]") {
  Generator gen(6);
  const Tensor hidden = randn({4, 16}, kF32, kCPU, &gen).requires_grad_();
  const Tensor head = randn({32, 16}, kF32, kCPU, &gen).requires_grad_();
  const Tensor target = from_vector(std::vector<int64_t>{1, 5, 9, 31}, {4});
  amp::Fp8State state(amp::Fp8Recipe::delayed_scaling({16, amp::AmaxAlgo::Max, 0}));
  for (int step = 0; step < 4; ++step) {
    amp::Autocast autocast(kCPU, kBF16, /*enabled=*/step % 2 == 0);  // a bf16 cast of the head, or the head
    amp::Fp8Autocast region(state);
    const Tensor loss = linear_cross_entropy(hidden, head, target);
    const Tensor y = linear(hidden, mul(head, 2.0));  // a weight computed in the step
    CHECK(y.grad_fn()->name() == std::string("linear"));
    add(loss, sum(y.to(kF32))).backward();
  }
  CHECK(state.linears() == 0);
}

// Catches the dtype report leaving a user to guess why a Linear ran in BF16
// inside an FP8 region: a kept Linear without the reason it was kept, a
// computed weight or the fused head without theirs, and a reason pinned on
// a row that ran FP8 or on the op after the Linear.
TEST_CASE("dtype report: why a Linear inside an FP8 region did not run FP8 (bug: no reason given)", "[fp8]") {
  Generator gen(8);
  nn::Linear body(16, 8), head(8, 32);
  amp::Fp8State state(amp::Fp8Recipe::current());
  state.keep_high_precision(head, "kept for this test");
  const Tensor x = randn({4, 16}, kF32, kCPU, &gen);
  const Tensor target = from_vector(std::vector<int64_t>{1, 5, 9, 31}, {4});
  autograd::DtypeRecorder recorder;
  {
    amp::Autocast autocast(kCPU, kBF16);
    amp::Fp8Autocast region(state);
    const Tensor h = relu(body.forward(x));
    head.forward(h);
    linear(h, mul(head.weight, 2.0));  // a weight computed in the step
    linear_cross_entropy(h, head.weight, target);
  }
  head.forward(randn({4, 8}, kF32, kCPU, &gen));  // outside the region: no reason to give
  std::map<std::string, std::string> why;         // op -> reason, for the rows that have one
  for (const autograd::DtypeReportRow& row : recorder.rows()) {
    INFO(row.module << " " << row.op << " " << row.inputs);
    if (row.op == "fp8_linear" || row.op == "relu" || row.op == "mul") CHECK(row.fp8.empty());
    const bool computed_weight = row.op == "linear" && row.inputs.find("param") == std::string::npos;
    if (!row.fp8.empty()) CHECK(why.emplace(row.op + (computed_weight ? " computed" : ""), row.fp8).second);
  }
  CHECK(why.size() == 3);
  CHECK(why["linear"] == "kept for this test");
  CHECK_THAT(why["linear computed"], Catch::Contains("computed in the step"));
  CHECK_THAT(why["linear_cross_entropy"], Catch::Contains("vocabulary head"));
}

// Catches --fp8-shadow measuring against the wrong twin (the FP8 output
// itself, or an f32 product where the region's dtype is bf16), an error
// kept from an earlier step, and twins run while shadowing is off.
TEST_CASE("fp8 shadow: each Linear's relative error against its BF16 twin (bug: a stale error)", "[fp8]") {
  Generator gen(9);
  nn::Linear layer(64, 32);
  amp::Fp8State state(amp::Fp8Recipe::current());
  const Tensor x = randn({16, 64}, kF32, kCPU, &gen);
  const auto forward = [&] {
    amp::Autocast autocast(kCPU, kBF16);
    amp::Fp8Autocast region(state);
    return layer.forward(x);
  };
  forward();
  CHECK(state.take_shadow_errors(layer).empty());  // off: no twin ran
  state.shadow_forward(true);
  const Tensor y = forward().detach().to(kF64);
  Tensor twin;
  {
    amp::Autocast autocast(kCPU, kBF16);
    twin = layer.forward(x).detach().to(kF64);  // outside the region: the BF16 Linear
  }
  const double want =
      std::sqrt(sum(mul(sub(y, twin), sub(y, twin))).item<double>() / sum(mul(twin, twin)).item<double>());
  const auto errors = state.take_shadow_errors(layer);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].first == "weight");
  CHECK(errors[0].second == Approx(want).epsilon(1e-5));
  CHECK(errors[0].second > 1e-3);                  // FP8 differs from BF16 by E4M3's rounding, not by nothing
  CHECK(state.take_shadow_errors(layer).empty());  // taken once
}

// Catches Fp8State keeping a dead Linear's histories for the rest of the run.
TEST_CASE("fp8 state: update drops the state of Linears whose weight died (bug: a leak)", "[fp8][memory_ledger]") {
  Generator gen(7);
  amp::Fp8State state(amp::Fp8Recipe::delayed_scaling({64, amp::AmaxAlgo::Max, 0}));
  const int64_t before = memory_ledger(kCPU)[MemoryCategory::Fp8State];
  {
    nn::Linear layer(16, 8);
    amp::Autocast autocast(kCPU, kBF16);
    amp::Fp8Autocast region(state);
    sum(layer.forward(randn({3, 16}, kF32, kCPU, &gen)).to(kF32)).backward();
    CHECK(state.linears() == 1);
    CHECK(memory_ledger(kCPU)[MemoryCategory::Fp8State] - before == 3 * (64 + 2) * 4);
    CHECK(state.memory_theory().state == 3 * (64 + 2) * 4);
  }
  state.update();
  CHECK(state.linears() == 0);
  CHECK(memory_ledger(kCPU)[MemoryCategory::Fp8State] == before);
}

TEST_CASE("fp8 statistics count saturated and flushed elements (bug: a stale scale's overflow not seen)",
          "[fp8][sim]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO(device.str());
    nn::Linear layer(16, 4);
    layer.to(device);
    amp::Fp8State state(amp::Fp8Recipe::delayed_scaling({1, amp::AmaxAlgo::Max, 0}));
    state.collect_statistics(true);
    auto step = [&](const std::vector<double>& values) {
      const Tensor x = from_vector(values, {2, 16}, kF32, device);
      {
        amp::Fp8Autocast region(state);
        sum(layer.forward(x)).backward();
      }
      state.update();
    };
    step(std::vector<double>(32, 1.0));  // amax 1: the next step's input scale is 448
    state.take_statistics(layer);
    // 5 values beyond |x| = 1 saturate at 448; 3 of 1e-7 (x 448 = 4.5e-5 < 2^-10) flush to zero.
    std::vector<double> v(32, 0.25);
    for (int i : {0, 3, 9, 17, 30}) v[static_cast<size_t>(i)] = i % 2 ? -7.5 : 3.0;
    for (int i : {5, 6, 21}) v[static_cast<size_t>(i)] = 1e-7;
    v[12] = 0.0;  // a zero is not a flush
    step(v);
    const std::vector<amp::Fp8TensorStatistics> stats = state.take_statistics(layer);
    REQUIRE(stats.size() == 3);
    const amp::Fp8TensorStatistics& input = stats[0];
    CHECK(input.parameter == "weight");
    CHECK(input.role == "input");
    CHECK(input.elements == 32);
    CHECK(input.saturated == 5.0 / 32);
    CHECK(input.flushed == 3.0 / 32);
    CHECK(input.amax == 7.5);
    CHECK(input.scale_min == Approx(448.0).epsilon(1e-6));
    CHECK(stats[1].role == "weight");
    CHECK(stats[2].role == "grad_output");
    CHECK(state.take_statistics(layer).empty());  // taken: the counters start again
  }
}

TEST_CASE("fp8 names the operand whose amax went non-finite first (bug: the NaN stop blind to FP8)", "[fp8]") {
  nn::Linear layer(8, 4);
  amp::Fp8State state(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
  auto step = [&](double fill) {
    std::vector<double> v(16, 0.5);
    v[3] = fill;
    {
      amp::Fp8Autocast region(state);
      sum(layer.forward(from_vector(v, {2, 8}))).backward();
    }
    state.update();
  };
  step(1.0);
  CHECK(state.first_nonfinite_operand(layer).empty());
  step(std::numeric_limits<double>::infinity());  // this step's input overflows
  step(1.0);
  CHECK(state.first_nonfinite_operand(layer) == "weight input: amax inf, 2 step(s) ago");
}
