// Optimizer state dtypes (PrecisionOptions::state_dtype): 8-bit block-wise
// moments against an f64 model of the same quantization, BF16 moments by
// stochastic rounding, which parameters keep f32 state, and checkpoints of
// each (bit-identical resume, conversion between formats, hostile state).
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <vector>

#include "kernels/optim/cpu.h"
#include "kernels/optim/state_format.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;

namespace {

const float* signed_code() { return kernels::dynamic_codes().data(); }
const float* unsigned_code() { return kernels::dynamic_codes().data() + kernels::kCodeEntries; }

// The entries whose value is nearest to x in f64 (two when x sits within a
// relative `slack` of a midpoint: f32 arithmetic may round either way there).
std::vector<int> nearest_entries(const float* code, double x, double relative_slack) {
  const double slack = relative_slack * std::abs(x);
  std::vector<std::pair<double, int>> by_distance;
  for (int k = 0; k < kernels::kCodeEntries; ++k) by_distance.emplace_back(std::abs(code[k] - x), k);
  std::sort(by_distance.begin(), by_distance.end());
  std::vector<int> out{by_distance[0].second};
  if (by_distance[1].first - by_distance[0].first <= slack) out.push_back(by_distance[1].second);
  return out;
}

struct Int8Moment {
  std::vector<double> codes, absmax;
};

Int8Moment moment_of(const optim::StateDict& state, const std::string& key) {
  return {state.at(key).to(kCPU).to_vector(), state.at(key + ".absmax").to(kCPU).to_vector()};
}

// One AdamW step of one parameter with 8-bit moments, in f64 from the state
// the kernel started from: dequantize, update, new absmax per block, nearest
// code. Checks the kernel's codes, absmax and weights against it.
void check_int8_adamw_step(const Int8Moment& m0, const Int8Moment& v0, const std::vector<double>& w0,
                           const std::vector<double>& g, const Int8Moment& m1, const Int8Moment& v1,
                           const std::vector<double>& w1, int t, const optim::AdamWOptions& o, int64_t block) {
  const size_t n = w0.size();
  std::vector<double> m(n), v(n), w(n);
  for (size_t i = 0; i < n; ++i) {
    m[i] = signed_code()[static_cast<int>(m0.codes[i])] * m0.absmax[i / block];
    v[i] = unsigned_code()[static_cast<int>(v0.codes[i])] * v0.absmax[i / block];
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
    const double step_size = o.lr / (1 - std::pow(o.beta1, t));
    const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps;
    w[i] = w0[i] * (1 - o.lr * o.weight_decay) - step_size * m[i] / denom;
  }
  int mismatched_codes = 0, ambiguous = 0;
  for (size_t b = 0; b * block < n; ++b) {
    double am = 0, av = 0;
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      am = std::max(am, std::abs(m[i]));
      av = std::max(av, v[i]);
    }
    CHECK(m1.absmax[b] == Approx(am).epsilon(1e-5));
    CHECK(v1.absmax[b] == Approx(av).epsilon(1e-5));
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      const std::vector<int> want_m = nearest_entries(signed_code(), m[i] / am, 1e-5);
      const std::vector<int> want_v = nearest_entries(unsigned_code(), v[i] / av, 1e-5);
      ambiguous += (want_m.size() > 1) + (want_v.size() > 1);
      const auto in = [](const std::vector<int>& ks, double c) {
        return std::find(ks.begin(), ks.end(), static_cast<int>(c)) != ks.end();
      };
      mismatched_codes += !in(want_m, m1.codes[i]) + !in(want_v, v1.codes[i]);
    }
  }
  CHECK(mismatched_codes == 0);
  CHECK(ambiguous < static_cast<int>(n) / 100);  // the slack excuses a few, not the test
  for (size_t i = 0; i < n; ++i) {
    if (std::abs(w1[i] - w[i]) > 1e-5 * (1 + std::abs(w[i]))) {
      FAIL_CHECK("weight " << i << ": " << w1[i] << " vs the f64 model's " << w[i]);
      return;
    }
  }
}

}  // namespace

// Catches: a wrong decade count or resolution (the unsigned code must have
// twice the signed one's), a table not sorted (the byte is the index), a
// missing 0 or 1, and a nearest-code search that returns a neighbour.
TEST_CASE("the 8-bit state codes are the dynamic tree codes, searched to the nearest entry", "[optim][state]") {
  const float* s = signed_code();
  const float* u = unsigned_code();
  for (int k = 1; k < kernels::kCodeEntries; ++k) {
    CHECK(s[k - 1] < s[k]);
    CHECK(u[k - 1] < u[k]);
  }
  CHECK(s[kernels::kSignedZeroCode] == 0.0f);
  CHECK(s[255] == 1.0f);
  CHECK(s[0] == static_cast<float>(-(0.1 + 63.5 * 0.9 / 64)));  // the largest centre of decade 6, negated
  CHECK(s[128] == static_cast<float>(1e-6 * 0.55));              // decade 0 has one centre when signed
  for (int p = 1; p <= 127; ++p) CHECK(s[127 - p] == -s[127 + p]);
  CHECK(u[kernels::kUnsignedZeroCode] == 0.0f);
  CHECK(u[1] == static_cast<float>(1e-6 * 0.325));  // ... and two when unsigned
  CHECK(u[254] == static_cast<float>(0.1 + 127.5 * 0.9 / 128));
  CHECK(u[255] == 1.0f);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    // Spread over the decades: x = +-10^(-7 .. 0).
    const double x = std::copysign(std::pow(10.0, 7 * (std::abs(unit(rng)) - 1)), unit(rng));
    const std::vector<int> want = nearest_entries(s, x, 0);
    CHECK(kernels::nearest_code(s, static_cast<float>(x)) == want[0]);
    CHECK(kernels::nearest_code(u, static_cast<float>(std::abs(x))) == nearest_entries(u, std::abs(x), 0)[0]);
  }
  CHECK(kernels::quantize_state(s, 0.3f, 0.0f, kernels::kSignedZeroCode) == kernels::kSignedZeroCode);
}

// Catches: the CPU's table lookup of the nearest code disagreeing with the
// kernels' binary search anywhere (a bucket's lower bound taken from the
// wrong end for negative floats, a bucket wider than a code gap, infinities).
TEST_CASE("the CPU's code lookup picks the byte the kernels' search picks, for every float bucket", "[optim][state]") {
  int64_t checked = 0, mismatched = 0;
  for (bool is_signed : {true, false}) {
    const float* code = is_signed ? signed_code() : unsigned_code();
    for (uint32_t key = 0; key < 65536; ++key) {
      for (uint32_t low : {0x0000u, 0x0001u, 0x4000u, 0x8000u, 0xbfffu, 0xfffeu, 0xffffu}) {
        const float x = bits_float((key << 16) | low);
        ++checked;
        if (kernels::cpu::nearest_state_code(is_signed, x) != kernels::nearest_code(code, x)) ++mismatched;
      }
    }
    // Every code value itself, and the midpoints between neighbours.
    for (int k = 0; k < kernels::kCodeEntries; ++k) {
      const float mid = k + 1 < kernels::kCodeEntries ? 0.5f * (code[k] + code[k + 1]) : code[k];
      for (float x : {code[k], mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)}) {
        ++checked;
        if (kernels::cpu::nearest_state_code(is_signed, x) != kernels::nearest_code(code, x)) ++mismatched;
      }
    }
  }
  INFO(mismatched << " of " << checked << " floats differ");
  CHECK(mismatched == 0);
}

// Catches: the absmax of the wrong block, the codes not written back after
// the update (requantize skipped), the parameter stepped with the requantized
// moments instead of this step's f32 ones, the signed code used for
// exp_avg_sq, and a partial last block mishandled.
TEST_CASE("8-bit AdamW state steps exactly as an f64 model of the block-wise quantization", "[optim][state]") {
  for (const Device device : {Device(kCPU), test::kCudaPath}) {
    INFO((device.is_cpu() ? "cpu" : "cuda path"));
    const int64_t n = 4500, block = 2048;  // two full blocks and a partial one
    Tensor p = test::random_tensor({n}, kF32, device, 7).requires_grad_();
    const optim::AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    optim::AdamW opt({p}, o, {.state_dtype = optim::StateDtype::Int8, .state_block = block});
    optim::StateDict before;
    for (int t = 1; t <= 4; ++t) {
      INFO("step " << t);
      // Gradients spanning four decades, so blocks have small and large moments.
      std::vector<double> g = test::random_tensor({n}, kF64, kCPU, 100 + t).to_vector();
      for (size_t i = 0; i < g.size(); ++i) g[i] *= std::pow(10.0, -static_cast<double>(i % 5));
      const std::vector<double> w0 = p.to(kCPU).to_vector();
      p.set_grad(from_vector(g, {n}, kF32, device));
      opt.step();
      const optim::StateDict after = opt.state_dict();
      REQUIRE(after.at("state.0.exp_avg").dtype() == kU8);
      REQUIRE(after.at("state.0.exp_avg.absmax").numel() == 3);
      if (t == 1) {
        const Int8Moment zero_m{std::vector<double>(n, kernels::kSignedZeroCode), {0, 0, 0}};
        const Int8Moment zero_v{std::vector<double>(n, kernels::kUnsignedZeroCode), {0, 0, 0}};
        check_int8_adamw_step(zero_m, zero_v, w0, g, moment_of(after, "state.0.exp_avg"),
                              moment_of(after, "state.0.exp_avg_sq"), p.to(kCPU).to_vector(), t, o, block);
      } else {
        check_int8_adamw_step(moment_of(before, "state.0.exp_avg"), moment_of(before, "state.0.exp_avg_sq"), w0, g,
                              moment_of(after, "state.0.exp_avg"), moment_of(after, "state.0.exp_avg_sq"),
                              p.to(kCPU).to_vector(), t, o, block);
      }
      before = after;
    }
  }
}

// Catches: BF16 moments rounded to nearest (an EMA whose per-step change is
// under half a BF16 ulp never moves), random bits shared between elements
// (they would all round the same way), or bits biased towards one side.
TEST_CASE("BF16 moments round up with the probability of the discarded fraction", "[optim][state]") {
  for (const Device device : {Device(kCPU), test::kCudaPath}) {
    INFO((device.is_cpu() ? "cpu" : "cuda path"));
    const int64_t n = 20000;
    Tensor p = zeros({n}, kF32, device).requires_grad_();
    optim::AdamW opt({p}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .weight_decay = 0},
                     {.seed = 3, .state_dtype = optim::StateDtype::BF16});
    const float g = 10.0234375f;
    p.set_grad(full({n}, g, kF32, device));
    opt.step();
    // exp_avg in f32 as the kernel computes it, and where it falls between two BF16 values.
    const float m = 0.9f * 0.0f + (1.0f - 0.9f) * g;
    const uint32_t bits = float_bits(m);
    const double fraction = (bits & 0xffffu) / 65536.0;
    const float below = bits_float(bits & 0xffff0000u), above = bits_float((bits & 0xffff0000u) + 0x10000u);
    const Tensor state = opt.state_dict().at("state.0.exp_avg");
    REQUIRE(state.dtype() == kBF16);
    int64_t up = 0, other = 0;
    for (double v : state.to(kCPU).to_vector()) {
      up += v == above;
      other += v != above && v != below;
    }
    CHECK(other == 0);
    const double expected = n * fraction, sigma = std::sqrt(n * fraction * (1 - fraction));
    INFO("rounded up " << up << " of " << n << ", expected " << expected);
    CHECK(std::abs(static_cast<double>(up) - expected) < 5 * sigma);
    CHECK(fraction > 0.1);  // the test's gradient puts m well inside the interval
  }
}

namespace {

struct Resumed {
  std::vector<double> params;
  optim::StateDict state;
};

// Steps 1..total of AdamW with `precision`, saving after `stop` steps and
// continuing in a new optimizer (and new parameter tensors) loaded from it.
Resumed run_with_resume(Device device, const optim::PrecisionOptions& precision, int stop, int total,
                        DType dtype = kF32) {
  const int64_t n = 4500;
  Tensor p = test::random_tensor({n}, dtype, device, 11).requires_grad_();
  const optim::AdamWOptions options{.lr = 0.01};
  auto opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, options, precision);
  for (int t = 1; t <= total; ++t) {
    if (t == stop + 1) {
      const optim::StateDict saved = opt->state_dict();
      p = p.detach().clone().requires_grad_();
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, options, precision);
      opt->load_state_dict(saved);
    }
    p.set_grad(test::random_tensor({n}, dtype, device, 200 + t));
    opt->step();
  }
  return {p.to(kCPU).to_vector(), opt->state_dict()};
}

}  // namespace

// Catches: rounding bits drawn from a host-side counter that a resume
// restarts, 8-bit absmax not saved or not loaded, and the saved codes
// requantized on load.
TEST_CASE("BF16 and 8-bit optimizer state resume bit-identically from a state dict", "[optim][state]") {
  for (const Device device : {Device(kCPU), test::kCudaPath}) {
    for (const auto state_dtype : {optim::StateDtype::BF16, optim::StateDtype::Int8}) {
      INFO((device.is_cpu() ? "cpu " : "cuda path ") << optim::state_dtype_name(state_dtype));
      const optim::PrecisionOptions precision{.seed = 8, .state_dtype = state_dtype, .state_block = 1024};
      const Resumed straight = run_with_resume(device, precision, 5, 5);
      const Resumed resumed = run_with_resume(device, precision, 3, 5);
      CHECK(resumed.params == straight.params);
      REQUIRE(resumed.state.size() == straight.state.size());
      for (const auto& [key, value] : straight.state) {
        INFO(key);
        CHECK(resumed.state.at(key).dtype() == value.dtype());
        CHECK(resumed.state.at(key).to(kCPU).to_vector() == value.to(kCPU).to_vector());
      }
    }
  }
}

// Catches: the bf16 parameter copy's stochastic rounding drawing its bits
// from a host-side counter, which a resume restarts (it did: the resumed run
// rounded steps 4 and 5 with the bits of steps 1 and 2) and a CUDA graph
// bakes into its replays.
TEST_CASE("stochastic rounding of bf16 parameters resumes bit-identically and is captured", "[optim][state][graph]") {
  for (const Device device : {Device(kCPU), test::kCudaPath}) {
    INFO((device.is_cpu() ? "cpu" : "cuda path"));
    const optim::PrecisionOptions precision{.master_weights = true, .stochastic_rounding = true, .seed = 5};
    const Resumed straight = run_with_resume(device, precision, 5, 5, kBF16);
    const Resumed resumed = run_with_resume(device, precision, 3, 5, kBF16);
    CHECK(resumed.params == straight.params);
  }
  // A captured step replayed three times rounds as three eager steps do.
  const Device sim = kSIM;
  std::vector<std::vector<double>> results;
  for (bool graphed : {false, true}) {
    Tensor p = test::random_tensor({3000}, kBF16, sim, 12).requires_grad_();
    p.set_grad(test::random_tensor({3000}, kBF16, sim, 13));
    optim::AdamW opt({p}, {.lr = 1e-3}, {.master_weights = true, .stochastic_rounding = true, .seed = 6});
    opt.step();  // the state exists before capture
    if (graphed) {
      CudaGraph graph(sim);
      graph.capture([&] { opt.step(); });
      for (int i = 0; i < 3; ++i) graph.replay();
      synchronize(sim);
    } else {
      for (int i = 0; i < 3; ++i) opt.step();
    }
    results.push_back(p.to(kCPU).to_vector());
  }
  CHECK(results[1] == results[0]);
}

// Catches: bitsandbytes' two exclusions lost (small tensors and the
// parameters a user keeps in f32, such as embeddings), and keep_f32_state
// accepted where it can no longer act.
TEST_CASE("8-bit state leaves small tensors and kept parameters in f32", "[optim][state]") {
  Tensor small = ones({10}).requires_grad_(), big = ones({64, 80}).requires_grad_(),
         embedding = ones({80, 64}).requires_grad_();
  optim::AdamW opt({small, big, embedding}, {}, {.state_dtype = optim::StateDtype::Int8});
  opt.keep_f32_state(embedding);
  CHECK_THROWS_WITH(opt.keep_f32_state(ones({3})), Catch::Contains("not one of this optimizer's"));
  for (const Tensor& p : {small, big, embedding}) p.set_grad(full(p.sizes(), 0.5));
  opt.step();
  const optim::StateDict state = opt.state_dict();
  CHECK(state.at("state.0.exp_avg").dtype() == kF32);
  CHECK(state.at("state.1.exp_avg").dtype() == kU8);
  CHECK(state.at("state.1.exp_avg_sq.absmax").numel() == 3);  // 5120 values in blocks of 2048
  CHECK(state.at("state.2.exp_avg").dtype() == kF32);
  CHECK(state.count("state.2.exp_avg.absmax") == 0);
  CHECK(state.at("format.state_block").item<double>() == 2048);
  CHECK_THROWS_WITH(opt.keep_f32_state(big), Catch::Contains("already has state"));

  // A shard's part stands for its whole parameter (set_state_numel): 8-bit
  // when the whole is large, however small the part.
  Tensor part = ones({5}).requires_grad_(), part_of_small = ones({5}).requires_grad_();
  optim::AdamW sharded({part, part_of_small}, {}, {.state_dtype = optim::StateDtype::Int8});
  sharded.set_state_numel(part, 5120);
  sharded.set_state_numel(part_of_small, 10);
  CHECK_THROWS_WITH(sharded.set_state_numel(part, 3), Catch::Contains("cannot stand for 3"));
  CHECK_THROWS_WITH(sharded.set_state_numel(ones({5}), 5120), Catch::Contains("not one of this optimizer's"));
  for (const Tensor& p : {part, part_of_small}) p.set_grad(full(p.sizes(), 0.5));
  sharded.step();
  CHECK(sharded.state_dict().at("state.0.exp_avg").dtype() == kU8);
  CHECK(sharded.state_dict().at("state.1.exp_avg").dtype() == kF32);
  CHECK_THROWS_WITH(sharded.set_state_numel(part, 5120), Catch::Contains("already has state"));
}

// Catches: a checkpoint's state format trusted to match the optimizer's (an
// f32 checkpoint copied into u8 codes, 8-bit codes read as f32 values).
TEST_CASE("a state dict saved in one state dtype loads into another", "[optim][state]") {
  const int64_t n = 5000;
  Tensor p = test::random_tensor({n}, kF32, kCPU, 21).requires_grad_();
  optim::AdamW int8_opt({p}, {}, {.state_dtype = optim::StateDtype::Int8, .state_block = 512});
  p.set_grad(test::random_tensor({n}, kF32, kCPU, 22));
  int8_opt.step();
  const optim::StateDict saved = int8_opt.state_dict();
  const std::vector<double> codes = saved.at("state.0.exp_avg").to_vector();
  const std::vector<double> absmax = saved.at("state.0.exp_avg.absmax").to_vector();

  optim::AdamW f32_opt({p}, {});
  f32_opt.load_state_dict(saved);
  const std::vector<double> values = f32_opt.state_dict().at("state.0.exp_avg").to_vector();
  for (int64_t i = 0; i < n; i += 37) {
    CHECK(values[i] == static_cast<float>(signed_code()[static_cast<int>(codes[i])] * static_cast<float>(absmax[i / 512])));
  }
  // ... and back into 8 bits with other blocks: the values survive within the code's resolution.
  optim::AdamW requantized({p}, {}, {.state_dtype = optim::StateDtype::Int8, .state_block = 2048});
  requantized.load_state_dict(f32_opt.state_dict());
  const optim::StateDict back = requantized.state_dict();
  CHECK(back.at("state.0.exp_avg.absmax").numel() == 3);
  const std::vector<double> back_codes = back.at("state.0.exp_avg").to_vector();
  const std::vector<double> back_absmax = back.at("state.0.exp_avg.absmax").to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const double v = signed_code()[static_cast<int>(back_codes[i])] * back_absmax[i / 2048];
    REQUIRE(std::abs(v - values[i]) <= 0.04 * std::abs(values[i]) + 1e-6 * back_absmax[i / 2048]);
  }
}

// Catches: hostile 8-bit state loaded as it is (a NaN or negative absmax
// poisons every step after; a block count that does not match reads past the
// absmax), and codes without their absmax; also where ZeRO-1 reads it
// (optim::moment_values: it once took any absmax and any block size).
TEST_CASE("hostile 8-bit optimizer state is refused with a clear error", "[optim][state][errors]") {
  Tensor p = ones({4096}).requires_grad_();
  optim::AdamW opt({p}, {}, {.state_dtype = optim::StateDtype::Int8});
  p.set_grad(full({4096}, 0.25));
  opt.step();
  const optim::StateDict good = opt.state_dict();
  const auto refused = [&](const std::function<void(optim::StateDict&)>& edit, const std::string& message) {
    optim::StateDict bad;
    for (const auto& [key, value] : good) bad[key] = value.clone();
    edit(bad);
    optim::AdamW fresh({p}, {}, {.state_dtype = optim::StateDtype::Int8});
    CHECK_THROWS_WITH(fresh.load_state_dict(bad), Catch::Contains(message));
  };
  refused([](optim::StateDict& s) { fill_(s["state.0.exp_avg.absmax"], NAN); }, "not a finite non-negative absmax");
  refused([](optim::StateDict& s) { fill_(s["state.0.exp_avg_sq.absmax"], -1.0); }, "not a finite non-negative");
  refused([](optim::StateDict& s) { s["state.0.exp_avg.absmax"] = zeros({3}); }, "must be f32 [2]");
  refused([](optim::StateDict& s) { s.erase("state.0.exp_avg.absmax"); }, "'state.0.exp_avg.absmax' is missing");
  refused([](optim::StateDict& s) { s.erase("format.state_block"); }, "without 'format.state_block'");
  refused([](optim::StateDict& s) { s["format.state_block"] = scalar_tensor(1000.0, kI64); }, "not a power of two");
  refused([](optim::StateDict& s) { s["state.0.exp_avg"] = zeros({4096}); }, "is not 8-bit codes, yet");
  optim::StateDict poisoned = good;
  poisoned["state.0.exp_avg_sq.absmax"] = full({2}, NAN);
  CHECK_THROWS_WITH(optim::moment_values(poisoned, "state.0.exp_avg_sq"), Catch::Contains("not a finite"));
  poisoned = good;
  poisoned["format.state_block"] = scalar_tensor(1000.0, kI64);
  CHECK_THROWS_WITH(optim::moment_values(poisoned, "state.0.exp_avg"), Catch::Contains("not a power of two"));
  // Good state: exp_avg_sq through the unsigned code (never negative), exp_avg through the signed one.
  for (double v : optim::moment_values(good, "state.0.exp_avg_sq").to_vector()) REQUIRE(v >= 0);
}
