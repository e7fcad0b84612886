// The known-answer checks (checks.h): one per own kernel family.
#include "kernels/verify/checks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/attention/attention.h"
#include "kernels/dispatch.h"
#include "kernels/fp8/fp8.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/cpu.h"
#include "kernels/gemm/int8.h"
#include "kernels/gemm/matmul.h"

namespace mt::kernels::verify {
namespace {

// Deterministic values in [-1, 1) (a fixed LCG: the same problem everywhere).
std::vector<double> test_values(size_t count, uint32_t seed) {
  std::vector<double> values(count);
  uint32_t state = seed * 2654435761u + 12345u;
  for (double& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<double>(state >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0;
  }
  return values;
}

std::vector<double> host_values(const Tensor& t) { return t.to(kCPU).to_vector(); }

// The largest |got - want| over the largest |want| (the output's scale).
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double scale = 0, error = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(got[i] - want[i]);
    error = std::isnan(e) ? INFINITY : std::max(error, e);
  }
  return error / std::max(scale, 1e-30);
}

// A few units in the last place of `dtype` at the output's scale.
double tolerance(DType dtype) {
  if (dtype == kBF16) return 8.0 / 128;
  if (dtype == kF16) return 8.0 / 1024;
  if (dtype == kF32) return 8e-5;  // long f32 sums in another order
  return 1e-12;
}

CheckResult verdict(OwnFamily family, double error, DType dtype) {
  CheckResult r;
  r.family = family;
  r.outcome = error <= tolerance(dtype) ? CheckOutcome::Verified : CheckOutcome::Failed;
  r.detail = fmt::format("largest error {:.3g} of the output's scale (tolerance {:.3g})", error, tolerance(dtype));
  return r;
}

// ---- GEMM rungs ------------------------------------------------------------

// C = GELU(op(A) op(B) + bias) in f64 from the rounded inputs, [m, n].
std::vector<double> gemm_reference(const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& bias, int m, int n, int k, bool trans_b) {
  std::vector<double> c(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double z = bias[j];
      for (int p = 0; p < k; ++p)
        z += a[static_cast<size_t>(i) * k + p] *
             (trans_b ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j]);
      c[static_cast<size_t>(i) * n + j] = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
    }
  }
  return c;
}

void run_gemm_rung(OwnFamily family, Backend backend, const GemmArgs& args, Stream stream) {
  switch (family) {
    case OwnFamily::GemmV7: MT_DEVICE_CALL(backend, gemm_v7_warp_specialized, args, stream); return;
    case OwnFamily::GemmV5: MT_DEVICE_CALL(backend, gemm_v5_pipelined, args, stream); return;
    case OwnFamily::GemmV3: MT_DEVICE_CALL(backend, gemm_v3_register_blocking, args, stream); return;
    case OwnFamily::GemmV2: MT_DEVICE_CALL(backend, gemm_v2_shared_tiles, args, stream); return;
    default: fail("kernel verification: {} is not a GEMM rung", family_info(family).name);
  }
}

// One rung on one layout: m, n ragged for 128 x 128 tiles, k for 64-deep
// stages; bias and the erf GELU in the epilogue.
double gemm_error(OwnFamily family, Device device, DType dtype, bool trans_b) {
  const int m = 130, n = 72, k = 264;
  const Tensor a = from_vector(test_values(static_cast<size_t>(m) * k, 1), {m, k}, dtype);
  const Tensor b = from_vector(test_values(static_cast<size_t>(k) * n, 2), trans_b ? Shape{n, k} : Shape{k, n}, dtype);
  const Tensor bias = from_vector(test_values(n, 3), {n}, dtype);
  const std::vector<double> want = gemm_reference(host_values(a), host_values(b), host_values(bias), m, n, k, trans_b);
  const Tensor da = a.to(device), db = b.to(device), dbias = bias.to(device), c = empty({m, n}, dtype, device);
  GemmArgs args;
  args.dtype = device_buffers::kernel_dtype(dtype, "kernel verification");
  args.m = m, args.n = n, args.k = k;
  args.a = da.data_ptr(), args.lda = k;
  args.b = db.data_ptr(), args.ldb = trans_b ? k : n, args.trans_b = trans_b;
  args.c = c.data_ptr(), args.ldc = n;
  args.bias = dbias.data_ptr();
  args.activation = GemmActivation::GeluErf;
  const Backend backend = backend_for(device, "kernel verification");
  MT_CHECK(family != OwnFamily::GemmV7 || gemm_hopper_supports_on(backend, args),
           "kernel verification: the Hopper rung cannot take its own check's operands on {}", device.str());
  run_gemm_rung(family, backend, args, launch_stream(device));
  return relative_error(host_values(c), want);
}

CheckResult gemm_check(OwnFamily family, Device device) {
  if (family == OwnFamily::GemmV7 || family == OwnFamily::GemmV5) {
    const double error = std::max(gemm_error(family, device, kF16, false), gemm_error(family, device, kBF16, true));
    return verdict(family, error, kBF16);
  }
  const DType dtype = family == OwnFamily::GemmV3 ? kF32 : kF64;
  return verdict(family, std::max(gemm_error(family, device, dtype, false), gemm_error(family, device, dtype, true)),
                 dtype);
}

// ---- attention rungs -------------------------------------------------------

// Forward (out, lse) and backward (dq, dk, dv) of one rung against the CPU's
// fused kernel: causal, key padding on the second sequence, 70 queries (a
// partial 64-row tile), head dim 64.
CheckResult attention_check(OwnFamily family, Device device) {
  const AttentionKernel kernel =
      family == OwnFamily::AttentionV3 ? AttentionKernel::V3TensorCore : AttentionKernel::V2Scalar;
  const DType dtype = kF16;
  const int64_t batch = 2, heads = 2, t = 70, d = 64;
  const Shape shape{batch, heads, t, d};
  const size_t count = static_cast<size_t>(batch * heads * t * d);
  const Tensor q = from_vector(test_values(count, 4), shape, dtype),
               k = from_vector(test_values(count, 5), shape, dtype);
  const Tensor v = from_vector(test_values(count, 6), shape, dtype),
               dout = from_vector(test_values(count, 7), shape, dtype);
  std::vector<double> padded(static_cast<size_t>(batch * t), 0.0);               // true: a key nobody attends to
  for (int64_t j = t - 9; j < t; ++j) padded[static_cast<size_t>(t + j)] = 1.0;  // the second sequence's last 9
  const Tensor padding = from_vector(padded, {batch, t}, kBool);
  AttentionProblem problem = attention_problem(q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), /*causal=*/true);
  struct Results {
    std::vector<double> out, lse, dq, dk, dv;
  };
  auto run = [&](Device where) {
    const Tensor wq = q.to(where), wk = k.to(where), wv = v.to(where), wdout = dout.to(where), wpad = padding.to(where);
    const Tensor out = empty(shape, dtype, where), lse = empty({batch, heads, t}, kF32, where);
    attention_forward(wq, wk, wv, wpad, Tensor(), problem, kernel, out, lse);
    const Tensor dq = empty(shape, dtype, where), dk = empty(shape, dtype, where), dv = empty(shape, dtype, where);
    attention_backward(wq, wk, wv, wpad, Tensor(), out, lse, wdout, problem, kernel, dq, dk, dv);
    return Results{host_values(out), host_values(lse), host_values(dq), host_values(dk), host_values(dv)};
  };
  const Results want = run(kCPU), got = run(device);
  const double error =
      std::max({relative_error(got.out, want.out), relative_error(got.lse, want.lse), relative_error(got.dq, want.dq),
                relative_error(got.dk, want.dk), relative_error(got.dv, want.dv)});
  return verdict(family, error, dtype);
}

// ---- the INT8 paths ---------------------------------------------------------

// Exact s32 sums on both sides: only the f32 scaling may round differently.
// The rung's problem is ragged everywhere (n = 45); cuBLASLt's INT8 GEMM
// takes n and k multiples of 4 only, so the vendor path's has n = 44.
CheckResult int8_check(OwnFamily family, Device device) {
  const int64_t m = 70, n = family == OwnFamily::Int8Mma ? 45 : 44, k = 100;
  std::vector<double> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k)), scales(static_cast<size_t>(n)),
      bias(static_cast<size_t>(n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>((i * 37 + 11) % 256);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(static_cast<int>((i * 53 + 7) % 255) - 127);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 1e-4 * static_cast<double>(i + 1);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.5 - 0.01 * static_cast<double>(i);
  const Tensor ha = from_vector(a, {m, k}, kU8), hb = from_vector(b, {n, k}, kI8);
  const Tensor hs = from_vector(scales, {n}), hbias = from_vector(bias, {n});
  Int8Gemm g{.m = m, .n = n, .k = k, .a_zero_point = 128, .activation = GemmActivation::Relu};
  const Tensor want = empty({m, n});
  g.a = static_cast<const uint8_t*>(ha.data_ptr());
  g.b = static_cast<const int8_t*>(hb.data_ptr());
  g.scales = hs.data<float>();
  g.bias = hbias.data<float>();
  cpu::int8_gemm(g, want);
  const Tensor da = ha.to(device), db = hb.to(device), ds = hs.to(device), dbias = hbias.to(device);
  const Tensor got = empty({m, n}, kF32, device);
  g.a = static_cast<const uint8_t*>(da.data_ptr());
  g.b = static_cast<const int8_t*>(db.data_ptr());
  g.scales = static_cast<const float*>(ds.data_ptr());
  g.bias = static_cast<const float*>(dbias.data_ptr());
  if (family == OwnFamily::Int8Mma) {
    MT_DEVICE_CALL(backend_for(device, "kernel verification"), int8_gemm_v9_mma, g, got.data_ptr(), false,
                   launch_stream(device));
  } else {
    int8_gemm_by_vendor_path(g, got);
  }
  return verdict(family, relative_error(host_values(got), host_values(want)), kF64);
}

// ---- the FP8 kernels --------------------------------------------------------

// Quantization writes the same bytes and scales as the CPU (both follow
// cvt.rn.satfinite, runtime/fp8.h); amax, dequantize and the GEMM's combine
// step agree to the f32 rounding of their sums.
CheckResult fp8_check(Device device) {
  const int64_t rows = 37, cols = 300;  // a partial 1 x 128 tile at the end of every row
  std::vector<double> values = test_values(static_cast<size_t>(rows * cols), 8);
  for (size_t i = 0; i < values.size(); i += 97) values[i] *= 900;  // outliers that saturate at the scale below
  const Tensor x = from_vector(values, {rows, cols});
  const Fp8Groups tiles{rows, cols, 1, 128};
  struct Results {
    std::vector<double> amax, per_tensor, tiled, scale_inv, dequantized, combined;
  };
  auto run = [&](Device where) {
    const Tensor wx = x.to(where), amax = empty({}, kF32, where), scale = full({}, 0.5, kF32, where);
    fp8_amax(wx, amax);
    const Tensor per_tensor = empty({rows, cols}, kF8E4M3, where);
    fp8_quantize_with_scale(wx, scale, per_tensor);
    const Tensor tiled = empty({rows, cols}, kF8E5M2, where), scale_inv = empty({tiles.count()}, kF32, where);
    fp8_quantize_grouped(wx, tiles, Fp8ScaleRule{kE5M2Format.max_finite, 1.0f}, tiled, scale_inv);
    const Tensor dequantized = empty({rows, cols}, kF32, where);
    fp8_dequantize(tiled, scale_inv, tiles, dequantized);
    // The combine step on two K groups of a [rows, 8] product: A's 1 x 128 tiles, B per tensor.
    const Tensor product = from_vector(test_values(static_cast<size_t>(2 * rows * 8), 9), {2, rows, 8}).to(where);
    const Tensor a_scales = from_vector(test_values(static_cast<size_t>(rows * 2), 10), {rows * 2}).to(where);
    const Tensor b_scale = full({1}, 0.25, kF32, where), bias = full({8}, 0.125, kF32, where);
    const Tensor combined = empty({rows, 8}, kF32, where);
    fp8_gemm_combine(product, 128, a_scales, Fp8Groups{rows, 256, 1, 128}, b_scale, Fp8Groups{8, 256, 8, 256}, bias,
                     combined);
    return Results{host_values(amax),      host_values(per_tensor),  host_values(tiled),
                   host_values(scale_inv), host_values(dequantized), host_values(combined)};
  };
  const Results want = run(kCPU), got = run(device);
  const bool same_bytes =
      got.per_tensor == want.per_tensor && got.tiled == want.tiled && got.scale_inv == want.scale_inv;
  const double error = std::max({relative_error(got.amax, want.amax), relative_error(got.dequantized, want.dequantized),
                                 relative_error(got.combined, want.combined)});
  CheckResult r = verdict(OwnFamily::Fp8, same_bytes ? error : INFINITY, kF32);
  if (!same_bytes) r.detail = "quantized bytes or scales differ from the CPU's";
  return r;
}

// ---- the FP8 GEMM rung -------------------------------------------------------

// E5M2 x E4M3 with block scales, ragged in m, n and k, bf16 out with bias and
// GELU, against the f64 value of Fp8Gemm's formula from the same bytes.
CheckResult fp8_rung_check(Device device) {
  const int m = 130, n = 136, k = 272, k_blocks = 3, n_blocks = 2;
  std::vector<double> a = test_values(static_cast<size_t>(m) * k, 11), b = test_values(static_cast<size_t>(n) * k, 12);
  for (double& v : a) v = f32_to_e5m2_bits(static_cast<float>(2 * v));
  for (double& v : b) v = f32_to_e4m3_bits(static_cast<float>(2 * v));
  std::vector<double> a_scales = test_values(static_cast<size_t>(m) * k_blocks, 13);
  std::vector<double> b_scales = test_values(static_cast<size_t>(n_blocks) * k_blocks, 14);
  for (double& s : a_scales) s = 1.5 + s;  // in [0.5, 2.5)
  for (double& s : b_scales) s = 1.5 + s;
  const Tensor bias = from_vector(test_values(n, 15), {n}, kBF16);
  const std::vector<double> bias_values = host_values(bias);
  std::vector<double> want(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double z = bias_values[j];
      for (int g = 0; g < k_blocks; ++g) {
        double block = 0;
        for (int q = g * 128; q < std::min(k, g * 128 + 128); ++q) {
          block += double(e5m2_bits_to_f32(static_cast<uint8_t>(a[size_t(i) * k + q]))) *
                   e4m3_bits_to_f32(static_cast<uint8_t>(b[size_t(j) * k + q]));
        }
        z += block * a_scales[size_t(i) * k_blocks + g] * b_scales[size_t(j / 128) * k_blocks + g];
      }
      want[size_t(i) * n + j] = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
    }
  }
  const Tensor da = from_vector(a, {m, k}, kU8).to(device), db = from_vector(b, {n, k}, kU8).to(device);
  const Tensor dsa = from_vector(a_scales, {m * k_blocks}).to(device);
  const Tensor dsb = from_vector(b_scales, {n_blocks * k_blocks}).to(device);
  const Tensor dbias = bias.to(device), out = empty({m, n}, kBF16, device);
  Fp8Gemm g;
  g.m = m, g.n = n, g.k = k;
  g.a = static_cast<const uint8_t*>(da.data_ptr()), g.a_e5m2 = true;
  g.b = static_cast<const uint8_t*>(db.data_ptr());
  g.a_scale_inv = static_cast<const float*>(dsa.data_ptr());
  g.b_scale_inv = static_cast<const float*>(dsb.data_ptr());
  g.block_scales = true;
  g.out_dtype = KernelDType::BF16, g.out = out.data_ptr(), g.bias = dbias.data_ptr();
  g.activation = GemmActivation::GeluErf;
  MT_DEVICE_CALL(backend_for(device, "kernel verification"), fp8_gemm_v10_wgmma, g, launch_stream(device));
  return verdict(OwnFamily::GemmV10Fp8, relative_error(host_values(out), want), kBF16);
}

CheckResult check_on(OwnFamily family, Device device) {
  switch (family) {
    case OwnFamily::GemmV7:
    case OwnFamily::GemmV5:
    case OwnFamily::GemmV3:
    case OwnFamily::GemmV2: return gemm_check(family, device);
    case OwnFamily::AttentionV3:
    case OwnFamily::AttentionV2: return attention_check(family, device);
    case OwnFamily::Int8Mma:
    case OwnFamily::Int8Vendor: return int8_check(family, device);
    case OwnFamily::Fp8: return fp8_check(device);
    case OwnFamily::GemmV10Fp8: return fp8_rung_check(device);
  }
  fail("kernel verification: unknown family");
}

}  // namespace

CheckResult run_check(OwnFamily family, Device device) {
  MT_CHECK(device.is_sim() || device.is_cuda(), "kernel verification: {} runs no own GPU kernels", device.str());
  CheckResult result;
  result.family = family;
  if (const std::optional<DeviceIdentity> identity = identity_for(device);
      identity && !family_applies(family, *identity)) {
    result.outcome = CheckOutcome::NotApplicable;
    result.detail = fmt::format("sm_{}{} cannot run it", identity->major, identity->minor);
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    const FamilyUnderCheck checking(family);
    result = check_on(family, device);
    synchronize(device);
  } catch (const std::exception& e) {
    result.outcome = CheckOutcome::Failed;
    result.detail = e.what();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mt::kernels::verify
