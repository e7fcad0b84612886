// The fused attention kernels against the reference path in f64, forward
// and backward, with every mask they take: the CPU's (kernels/attention/
// cpu.cpp) and the CUDA path's (kernels/attention/ladder/: v2 scalar, v3
// Tensor Core; sim without a GPU); the op choosing them, falling back, and
// MT_ATTENTION.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/threads.h"
#include "kernels/attention/attention.h"
#include "mixtape.h"
#include "runtime/launch_check.h"
#include "test_util.h"
#include "tests/kernels/cpu_library_util.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using namespace mt::test;

namespace {

struct Case {
  const char* name;
  int64_t batch, heads, q_len, k_len, head_dim, value_dim;
  bool causal = false;
  bool padded = false;
  bool three_dims = false;  // [B, T, D] instead of [B, H, T, D]
};

// The cases cross the kernels' tile edges (64 query rows, 32 keys) with ragged lengths.
const std::vector<Case> kCases = {
    {"plain, ragged", 2, 2, 37, 45, 64, 64},
    {"causal across two query blocks", 1, 2, 70, 70, 64, 64, true},
    {"causal, fewer queries than keys", 2, 1, 20, 50, 64, 64, true},
    {"key padding", 2, 2, 33, 40, 64, 64, false, true},
    {"causal and key padding", 2, 1, 66, 66, 64, 64, true, true},
    {"head dim 128", 1, 2, 40, 36, 128, 128},
    {"head dims 40 and 24 (v2 only)", 2, 1, 30, 35, 40, 24, true},
    {"[B, T, D] with padding", 2, 1, 25, 31, 64, 64, false, true, true},
};

Shape shape_of(const Case& c, int64_t length, int64_t width) {
  return c.three_dims ? Shape{c.batch, length, width} : Shape{c.batch, c.heads, length, width};
}

// Batch 0 pads its last 7 keys, batch 1 keys 3..5 (true = padding): no query
// row is left without a key, even under a causal mask.
Tensor padding_mask(const Case& c, Device device) {
  std::vector<double> bits(static_cast<size_t>(c.batch * c.k_len), 0.0);
  for (int64_t j = 0; j < c.k_len; ++j) {
    bits[static_cast<size_t>(j)] = j >= c.k_len - 7 ? 1.0 : 0.0;
    if (c.batch > 1) bits[static_cast<size_t>(c.k_len + j)] = j >= 3 && j < 6 ? 1.0 : 0.0;
  }
  return from_vector(bits, {c.batch, c.k_len}, kBool, device);
}

AttentionOptions options_of(const Case& c, Device device) {
  AttentionOptions o;
  o.is_causal = c.causal;
  if (c.padded) o.key_padding_mask = padding_mask(c, device);
  return o;
}

struct Inputs {
  Tensor q, k, v, weight;  // weight: the backward's upstream gradient is d(sum(out * weight))/d(out)
};

// Values in [-3, 3]: scores of a few units, so the softmax is peaked and a
// wrong running max shows.
Inputs make_inputs(const Case& c, DType dtype, Device device, unsigned seed) {
  return {random_tensor(shape_of(c, c.q_len, c.head_dim), dtype, device, seed, -3, 3),
          random_tensor(shape_of(c, c.k_len, c.head_dim), dtype, device, seed + 1, -3, 3),
          random_tensor(shape_of(c, c.k_len, c.value_dim), dtype, device, seed + 2, -3, 3),
          random_tensor(shape_of(c, c.q_len, c.value_dim), dtype, device, seed + 3)};
}

Inputs to_cpu_f64(const Inputs& in, bool grad) {
  const auto f64 = [grad](const Tensor& t) {
    Tensor x = t.detach().to(kCPU).to(kF64);
    if (grad) x.requires_grad_(true);
    return x;
  };
  return {f64(in.q), f64(in.k), f64(in.v), in.weight.to(kCPU).to(kF64)};
}

struct Result {
  Tensor out, dq, dk, dv;
};

Result run(const Inputs& in, const AttentionOptions& options) {
  const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, options);
  sum(mul(out, in.weight)).backward();
  return {out, in.q.grad(), in.k.grad(), in.v.grad()};
}

// out and the three gradients of `got` against `want`, within `tol`.
void check_all(const Result& got, const Result& want, double tol) {
  const auto f64 = [](const Tensor& t) { return t.to(kCPU).to(kF64); };
  check_close(f64(got.out), f64(want.out), tol, "out");
  check_close(f64(got.dq), f64(want.dq), tol, "grad q");
  check_close(f64(got.dk), f64(want.dk), tol, "grad k");
  check_close(f64(got.dv), f64(want.dv), tol, "grad v");
}

Inputs with_grad(Inputs in) {
  in.q.requires_grad_(true);
  in.k.requires_grad_(true);
  in.v.requires_grad_(true);
  return in;
}

// log sum_j exp(q_i . k_j * scale) over the keys case `c` keeps, [B, H, Tq] in f64.
Tensor reference_lse(const Case& c, const Tensor& q, const Tensor& k, const Tensor& padding, double scale) {
  const std::vector<double> s = matmul(q, k.transpose(-2, -1)).to_vector();
  const std::vector<double> pad = padding.defined() ? padding.to(kCPU).to_vector() : std::vector<double>();
  std::vector<double> lse(static_cast<size_t>(c.batch * c.heads * c.q_len));
  for (int64_t row = 0; row < static_cast<int64_t>(lse.size()); ++row) {
    const int64_t b = row / (c.heads * c.q_len), i = row % c.q_len;
    double max = -INFINITY, total = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t j = 0; j < c.k_len; ++j) {
        if ((c.causal && j > i) || (!pad.empty() && pad[static_cast<size_t>(b * c.k_len + j)] != 0)) continue;
        const double x = s[static_cast<size_t>(row * c.k_len + j)] * scale;
        if (pass == 0) max = std::max(max, x);
        if (pass == 1) total += std::exp(x - max);
      }
    }
    lse[static_cast<size_t>(row)] = max + std::log(total);
  }
  return from_vector(lse, {c.batch, c.heads, c.q_len}, kF64);
}

// The profile table's row for `kernel` exists.
bool ran(const std::string& kernel) { return kernels::profile_report(200).find(kernel) != std::string::npos; }

// The fused kernels made `out`: its node is the op's own (the reference
// path's last node is its matmul's).
bool fused(const Tensor& out) {
  return out.grad_fn() != nullptr && out.grad_fn()->name() == std::string("scaled_dot_product_attention");
}

// Both back ends of the fused op: the CPU's kernel and the CUDA path's.
const std::vector<Device> kDevices = {kCPU, kCudaPath};

}  // namespace

// Catches: a running max not rescaling the sum and accumulator (wrong when a
// later key tile holds the row's max), causal masking aligned bottom-right or
// off by one at tile edges, padding read for the wrong batch or meaning,
// keys past the end of a ragged tile counted, lse not m + log l, a head
// offset using the wrong length, and in backward: delta not rowsum(dO * O),
// ds missing the scale, grad_k/grad_v missing queries of another query tile
// (the CPU's tiles are 64 x 64: the cases cross them too).
TEST_CASE("fused attention matches the f64 reference forward and backward in f32, f16 and bf16", "[attention][sim]") {
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kF16, kBF16}) {
      for (const Case& c : kCases) {
        INFO(c.name << " in " << dtype_name(dtype) << " on " << device.str());
        const Inputs device_in = with_grad(make_inputs(c, dtype, device, 11));
        const Inputs cpu_in = to_cpu_f64(device_in, true);
        kernels::profile_reset();
        kernels::set_profiling(true);
        const Result got = run(device_in, options_of(c, device));
        kernels::set_profiling(false);
        const Result want = run(cpu_in, options_of(c, kCPU));
        CHECK(fused(got.out));
        if (device == kCudaPath) {
          const bool tensor_cores = dtype != kF32 && c.head_dim == c.value_dim && c.head_dim % 64 == 0;
          CHECK(ran(tensor_cores ? "attention_v3_forward" : "attention_v2_forward"));
          CHECK(ran(tensor_cores ? "attention_v3_grad_kv" : "attention_v2_grad_kv"));
          CHECK(ran(tensor_cores ? "attention_v3_grad_q" : "attention_v2_grad_q"));
          CHECK_FALSE(ran("softmax_forward_kernel"));  // the reference path did not run
        }
        check_all(got, want, dtype_tolerance(dtype));
      }
    }
  }
  kernels::profile_reset();
}

// The CPU's bf16 attention multiplies its tiles with AVX512-BF16 dot
// products where the CPU has them (rounding P and dS to bf16) and on
// Eigen's f32 tiles elsewhere; MT_CPU_GEMM=eigen takes the second here.
// Catches: either path drifting from f64 while the other is the one tested
// (this machine would otherwise never run the AVX2-only machines' path).
TEST_CASE("the CPU's bf16 attention matches f64 on both tile-product paths", "[attention]") {
  for (const kernels::CpuGemmLibrary library : {kernels::CpuGemmLibrary::Eigen, kernels::CpuGemmLibrary::Auto}) {
    const UseLibrary use(library);
    for (const Case& c : kCases) {
      INFO(c.name << " with " << (library == kernels::CpuGemmLibrary::Eigen ? "eigen" : "auto") << " tiles");
      const Inputs in = with_grad(make_inputs(c, kBF16, kCPU, 21));
      const Result got = run(in, options_of(c, kCPU));
      const Result want = run(to_cpu_f64(in, true), options_of(c, kCPU));
      CHECK(fused(got.out));
      check_all(got, want, dtype_tolerance(kBF16));
    }
  }
}

// Catches: v3's fragment bookkeeping (a K or V fragment from the wrong
// matrix of ldmatrix_x4, P's accumulator-to-A-fragment shuffle, the quad
// reduction of the row max and sum) that the op-level test would blame on
// the dtype tolerance; and lse from either rung.
TEST_CASE("attention ladder: v2 and v3 give the same out and lse", "[attention][sim]") {
  for (const DType dtype : {kF16, kBF16}) {
    for (const Case& c : kCases) {
      if (c.three_dims || c.head_dim != c.value_dim || c.head_dim % 64 != 0) continue;
      INFO(c.name << " in " << dtype_name(dtype));
      const Inputs in = make_inputs(c, dtype, kCudaPath, 21);
      const Tensor padding = c.padded ? padding_mask(c, kCudaPath) : Tensor();
      const kernels::AttentionProblem problem =
          kernels::attention_problem(in.q, in.k, in.v, 1.0 / std::sqrt(double(c.head_dim)), c.causal);
      std::vector<Tensor> outs, lses;
      for (const auto kernel : {kernels::AttentionKernel::V2Scalar, kernels::AttentionKernel::V3TensorCore}) {
        outs.push_back(empty({c.batch, c.heads, c.q_len, c.value_dim}, dtype, kCudaPath));
        lses.push_back(empty({c.batch, c.heads, c.q_len}, kF32, kCudaPath));
        kernels::attention_forward(in.q, in.k, in.v, padding, Tensor(), problem, kernel, outs.back(), lses.back());
      }
      check_matches(outs[1].to(kF64), outs[0].to(kCPU).to(kF64), 2 * dtype_tolerance(dtype), "v3 out vs v2 out");
      // lse against the definition: log sum_j exp(s_ij) over the kept keys, in f64.
      const Inputs cpu = to_cpu_f64(in, false);
      const Tensor want_lse = reference_lse(c, cpu.q, cpu.k, padding, problem.scale);
      check_matches(lses[0].to(kF64), want_lse, 1e-5, "v2 lse");
      check_matches(lses[1].to(kF64), want_lse, 1e-5, "v3 lse");
    }
  }
}

// Catches: a fully masked row averaging garbage (PyTorch's math path, and the
// reference path, give NaN) or its NaN spreading into the other rows' and
// the keys' gradients through delta.
TEST_CASE("fused attention: a row with every key masked is NaN and leaves the other gradients finite",
          "[attention][sim]") {
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kF16}) {
      INFO(dtype_name(dtype) << " on " << device.str());
      const Case c{"all padding in batch 0", 2, 1, 5, 64, 64, 64, false, true};
      Inputs in = with_grad(make_inputs(c, dtype, device, 31));
      AttentionOptions options;
      std::vector<double> bits(static_cast<size_t>(2 * c.k_len), 0.0);
      for (int64_t j = 0; j < c.k_len; ++j) bits[static_cast<size_t>(j)] = 1.0;  // batch 0: every key is padding
      options.key_padding_mask = from_vector(bits, {2, c.k_len}, kBool, device);
      const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, options);
      CHECK(fused(out));
      const std::vector<double> values = out.to(kCPU).to_vector();
      const size_t per_batch = values.size() / 2;
      for (size_t e = 0; e < values.size(); ++e) {
        if (e < per_batch) {
          CHECK(std::isnan(values[e]));
        } else {
          CHECK(std::isfinite(values[e]));
        }
      }
      // Backward from batch 1's rows only: every gradient finite, batch 0's q gradient zero.
      sum(mul(out.select(0, 1), in.weight.select(0, 1))).backward();
      for (const Tensor* g : {&in.q, &in.k, &in.v}) {
        for (double x : g->grad().to(kCPU).to_vector()) REQUIRE(std::isfinite(x));
      }
      for (double x : in.q.grad().select(0, 0).to(kCPU).to_vector()) CHECK(x == 0.0);
    }
  }
}

// Catches: a bool attn_mask read with the opposite meaning or along the
// wrong dim, a float mask scaled with the scores or dropped in backward's
// recomputed probabilities, and broadcast dims read with their real strides.
TEST_CASE("fused attention takes bool and float attn_masks that broadcast to the scores", "[attention][sim]") {
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kF16, kBF16}) {
      const Case c{"masked", 2, 2, 37, 45, 64, 64};
      INFO(dtype_name(dtype) << " on " << device.str());
      const Inputs device_in = with_grad(make_inputs(c, dtype, device, 71));
      const Inputs cpu_in = to_cpu_f64(device_in, true);
      std::vector<double> keep(static_cast<size_t>(c.q_len * c.k_len));
      for (size_t e = 0; e < keep.size(); ++e) keep[e] = (e * 7 % 5 != 0) || e % static_cast<size_t>(c.k_len) == 0;
      const Tensor bool_mask = from_vector(keep, {c.q_len, c.k_len}, kBool);
      const Tensor float_mask = random_tensor({c.batch, 1, c.q_len, c.k_len}, kF32, kCPU, 72, -2, 2);
      for (const Tensor& mask : {bool_mask, float_mask}) {
        INFO((mask.dtype() == kBool ? "bool [Tq, Tk]" : "float [B, 1, Tq, Tk]"));
        AttentionOptions on_device, on_cpu;
        on_device.attn_mask = mask.dtype() == kBool ? mask.to(device) : mask.to(dtype).to(device);
        on_cpu.attn_mask = mask.dtype() == kBool ? mask : on_device.attn_mask.to(kCPU).to(kF64);
        const Result got = run(device_in, on_device);
        CHECK(fused(got.out));
        check_all(got, run(cpu_in, on_cpu), dtype_tolerance(dtype));
        for (const Tensor* t : {&device_in.q, &device_in.k, &device_in.v, &cpu_in.q, &cpu_in.k, &cpu_in.v}) {
          t->set_grad(Tensor());
        }
      }
    }
  }
}

// Catches: a fused dropout mask that differs from the dropout op's (another
// Philox index for (b, h, i, j), the scale 1 / (1 - p) missing, the softmax
// sum taken after dropout), backward redrawing another mask or not taking
// dp through it, and the generator left where the reference path would not
// leave it (every later random draw would change).
TEST_CASE("fused attention with dropout draws the dropout op's mask, forward and backward", "[attention][sim]") {
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kF16, kBF16}) {
      for (const Case& c : {Case{"causal, padded", 2, 2, 37, 37, 64, 64, true, true},
                            Case{"head dims 40 and 24, two key tiles", 1, 2, 20, 70, 40, 24}}) {
        INFO(c.name << " in " << dtype_name(dtype) << " on " << device.str());
        std::vector<Result> results;
        std::vector<double> next_draws;
        for (const bool math : {true, false}) {
          if (math) ::setenv("MT_ATTENTION", "math", 1);
          const Inputs in = with_grad(make_inputs(c, dtype, device, 61));
          AttentionOptions options = options_of(c, device);
          options.dropout_p = 0.3;
          manual_seed(77);
          results.push_back(run(in, options));
          next_draws.push_back(rand({1}).item<double>());
          ::unsetenv("MT_ATTENTION");
        }
        CHECK_FALSE(fused(results[0].out));
        CHECK(fused(results[1].out));
        CHECK(next_draws[1] == next_draws[0]);
        check_all(results[1], results[0], 2 * dtype_tolerance(dtype));
      }
    }
  }
}

// Catches: the op sending a call the kernels do not take (a float attn_mask
// that needs a gradient, f64, broadcast k) to them anyway, a mask that does
// not broadcast read out of bounds instead of refused, and MT_ATTENTION=math not
// turning them off; a bad MT_ATTENTION silently meaning auto.
TEST_CASE("scaled_dot_product_attention falls back to the reference path where the kernels do not apply",
          "[attention][sim]") {
  for (const Device device : kDevices) {
    INFO(device.str());
    const Case c{"small", 1, 2, 9, 12, 64, 64};
    const Inputs in = with_grad(make_inputs(c, kF16, device, 41));
    const auto uses_fused = [&](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
      kernels::profile_reset();
      kernels::set_profiling(true);
      const bool made_by_kernels = fused(scaled_dot_product_attention(q, k, v, o));
      kernels::set_profiling(false);
      if (device == kCudaPath) {
        CHECK(made_by_kernels == (ran("attention_v3_forward") || ran("attention_v2_forward")));
        CHECK(made_by_kernels != ran("softmax_forward_kernel"));
      }
      return made_by_kernels;
    };
    CHECK(uses_fused(in.q, in.k, in.v, {}));
    AttentionOptions dropout;
    dropout.dropout_p = 0.1;
    CHECK(uses_fused(in.q, in.k, in.v, dropout));
    AttentionOptions masked;
    masked.attn_mask = ones({c.q_len, c.k_len}, kBool, device);
    CHECK(uses_fused(in.q, in.k, in.v, masked));
    AttentionOptions learned_bias;
    learned_bias.attn_mask = zeros({c.q_len, c.k_len}, kF16, device).requires_grad_();
    CHECK_FALSE(uses_fused(in.q, in.k, in.v, learned_bias));
    AttentionOptions misshapen;  // left to the reference path, whose where() names the shapes
    misshapen.attn_mask = ones({c.q_len + 1, c.k_len}, kBool, device);
    CHECK_THROWS_WITH(scaled_dot_product_attention(in.q, in.k, in.v, misshapen),
                      Catch::Contains("cannot be broadcast"));
    CHECK_FALSE(uses_fused(in.q.to(kF64), in.k.to(kF64), in.v.to(kF64), {}));
    CHECK_FALSE(uses_fused(in.q, in.k.narrow(0, 0, 1).narrow(1, 0, 1), in.v.narrow(0, 0, 1).narrow(1, 0, 1), {}));
    ::setenv("MT_ATTENTION", "math", 1);
    CHECK_FALSE(uses_fused(in.q, in.k, in.v, {}));
    ::setenv("MT_ATTENTION", "flash", 1);
    CHECK_THROWS_WITH(scaled_dot_product_attention(in.q, in.k, in.v), Catch::Contains("expected auto, own or math"));
    ::unsetenv("MT_ATTENTION");
  }
  kernels::profile_reset();
}

// Catches: the fused op saving the T x T probabilities (or anything T x T)
// for backward: beyond its inputs it keeps only each row's lse (out is held
// by the caller).
TEST_CASE("fused attention keeps no T x T tensor for backward", "[attention][sim]") {
  const int64_t t = 256, d = 64;
  const Shape shape{1, 1, t, d};
  for (const Device device : kDevices) {
    INFO(device.str());
    const int64_t saved = test::saved_bytes(
        device, {shape, shape, shape},
        [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, kBF16);
    CHECK(saved == 3 * t * d * 2 + t * 4);  // q, k, v in bf16 and the f32 lse
  }
}

// Catches: the CPU kernel reading a view's rows as if contiguous (the head
// split's [B, T, H, D] -> [B, H, T, D] transposes, which it reads in place
// through their strides: a wrong batch, head or row stride), for q, k, v and
// a transposed upstream gradient.
TEST_CASE("fused attention reads transposed head views and a transposed gradient", "[attention][sim]") {
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kBF16}) {
      INFO(dtype_name(dtype) << " on " << device.str());
      const int64_t b = 2, h = 3, t = 70, d = 40;
      const auto heads_view = [&](unsigned seed) {  // [B, T, H, D] storage seen as [B, H, T, D]
        return random_tensor({b, t, h, d}, dtype, device, seed, -3, 3).transpose(1, 2);
      };
      Inputs in{heads_view(91), heads_view(92), heads_view(93), random_tensor({b, t, h, d}, dtype, device, 94)};
      in = with_grad(in);
      REQUIRE_FALSE(in.q.is_contiguous());
      const Inputs want_in = to_cpu_f64(in, true);
      AttentionOptions options;
      options.is_causal = true;
      const auto run_merged = [&](const Inputs& x) {  // the upstream gradient arrives transposed, as after merge_heads
        const Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, options);
        sum(mul(out.transpose(1, 2), x.weight)).backward();
        return Result{out, x.q.grad(), x.k.grad(), x.v.grad()};
      };
      const Result got = run_merged(in);
      CHECK(fused(got.out));
      check_all(got, run_merged(want_in), dtype_tolerance(dtype));
    }
  }
}

// Catches: a CPU result that depends on how many threads ran it (a task
// split that changes an accumulation order, a per-thread buffer shared
// between tasks), forward and backward, with dropout and a causal mask.
TEST_CASE("the CPU's fused attention gives the same bits on 1 and 2 threads", "[attention]") {
  const Case c{"causal, padded, three query tiles", 2, 3, 150, 150, 64, 64, true, true};
  std::vector<Result> results;
  for (const int threads : {1, 2}) {
    set_num_threads(threads);
    const Inputs in = with_grad(make_inputs(c, kBF16, kCPU, 81));
    AttentionOptions options = options_of(c, kCPU);
    options.dropout_p = 0.2;
    manual_seed(5);
    results.push_back(run(in, options));
  }
  set_num_threads(default_num_threads());
  check_all(results[1], results[0], 0.0);
}

// Catches: a query head reading the wrong K/V head (h % KV instead of
// h / (H / KV)), K/V gradients keeping only one query head of the group (or
// racing: each K/V head's gradient must be the group's sum, in order), the
// batch offset of a K/V head counted in query heads, and the fused path not
// taking grouped K/V (repeating it instead) on any back end.
TEST_CASE("grouped-query attention: fused kernels read each K/V head for its group, forward and backward",
          "[attention][sim][gqa]") {
  struct Group {
    const char* name;
    int64_t heads, kv_heads, head_dim;
    bool causal, padded;
  };
  const std::vector<Group> groups = {{"4 query heads on 2, causal", 4, 2, 64, true, false},
                                     {"3 query heads on 1, padded", 3, 1, 64, false, true},
                                     {"4 on 2, head dim 40 (v2)", 4, 2, 40, true, true}};
  for (const Device device : kDevices) {
    for (const DType dtype : {kF32, kBF16}) {
      for (const Group& g : groups) {
        INFO(g.name << " in " << dtype_name(dtype) << " on " << device.str());
        const Case c{g.name, 2, g.heads, 37, 45, g.head_dim, g.head_dim, g.causal, g.padded};
        const Case kv_case{g.name, 2, g.kv_heads, 37, 45, g.head_dim, g.head_dim, g.causal, g.padded};
        Inputs in = make_inputs(c, dtype, device, 31);
        const Inputs kv = make_inputs(kv_case, dtype, device, 41);
        in.k = kv.k;
        in.v = kv.v;
        in = with_grad(in);
        AttentionOptions options = options_of(c, device);
        options.enable_gqa = true;
        kernels::profile_reset();
        kernels::set_profiling(true);
        const Result got = run(in, options);
        kernels::set_profiling(false);
        CHECK(fused(got.out));
        CHECK(got.dk.sizes() == in.k.sizes());
        if (device == kCudaPath) {
          const bool tensor_cores = dtype != kF32 && g.head_dim % 64 == 0;
          CHECK(ran(tensor_cores ? "attention_v3_grad_kv" : "attention_v2_grad_kv"));
        }
        // The reference: the K/V heads repeated by hand (repeat_interleave), in f64; their
        // gradients flow back through the repeat, summing each group.
        const Inputs ref = to_cpu_f64(in, true);
        const int64_t repeat = g.heads / g.kv_heads;
        auto repeated = [&](const Tensor& t) {
          return t.unsqueeze(2)
              .expand({2, g.kv_heads, repeat, t.size(2), t.size(3)})
              .reshape({2, g.heads, t.size(2), t.size(3)});
        };
        const Tensor out = scaled_dot_product_attention(ref.q, repeated(ref.k), repeated(ref.v), options_of(c, kCPU));
        sum(mul(out, ref.weight)).backward();
        check_all(got, {out, ref.q.grad(), ref.k.grad(), ref.v.grad()}, 2 * dtype_tolerance(dtype));
      }
    }
  }
  kernels::profile_reset();
  // The reference path takes grouped K/V too (f64), and a group that does not divide is refused.
  const Tensor q = randn({1, 4, 5, 8}, kF64), k = randn({1, 2, 5, 8}, kF64);
  AttentionOptions gqa;
  gqa.enable_gqa = true;
  const Tensor k_repeated = k.unsqueeze(2).expand({1, 2, 2, 5, 8}).reshape({1, 4, 5, 8});
  check_close(scaled_dot_product_attention(q, k, k, gqa), scaled_dot_product_attention(q, k_repeated, k_repeated),
              1e-12, "reference path");
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, randn({1, 3, 5, 8}, kF64), randn({1, 3, 5, 8}, kF64), gqa),
                    Catch::Contains("H_kv dividing H"));
}
