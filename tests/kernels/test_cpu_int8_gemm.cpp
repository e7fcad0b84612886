// The CPU's INT8 GEMM (kernels/gemm/int8.cpp): u8 activations with a zero
// point x s8 weights with a scale per output channel, on both paths (oneDNN
// where the CPU's INT8 products are native, the s32 loop always) against
// the exact integer sums, with bias and activations, into f32 and bf16.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "kernels/common/cpu_backend.h"
#include "kernels/gemm/cpu.h"
#include "kernels/quantize/math.h"
#include "tests/kernels/cpu_library_util.h"

using namespace mt;
using kernels::GemmActivation;
using kernels::Int8Gemm;

namespace {

struct Operands {
  int64_t m, n, k;
  std::vector<uint8_t> a;
  std::vector<int8_t> b;
  std::vector<float> scales, bias;
};

// Full-range values: a in [0, 255], b in [-128, 127]; scales of a typical
// INT8 Linear (1e-4 .. 1e-2), biases of a few units.
Operands make_operands(int64_t m, int64_t n, int64_t k, unsigned seed) {
  std::mt19937 gen(seed);
  Operands o{m, n, k, {}, {}, {}, {}};
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  std::uniform_real_distribution<float> scale(1e-4f, 1e-2f), bias(-3.0f, 3.0f);
  for (int64_t i = 0; i < m * k; ++i) o.a.push_back(static_cast<uint8_t>(u8(gen)));
  for (int64_t i = 0; i < n * k; ++i) o.b.push_back(static_cast<int8_t>(s8(gen)));
  for (int64_t j = 0; j < n; ++j) {
    o.scales.push_back(scale(gen));
    o.bias.push_back(bias(gen));
  }
  return o;
}

double activate(GemmActivation activation, double z) {
  if (activation == GemmActivation::Relu) return z > 0 ? z : 0.0;
  if (activation == GemmActivation::GeluErf) return 0.5 * z * std::erfc(-z / std::sqrt(2.0));
  return z;
}

// The exact sums (int64), scaled, biased and activated in f64.
std::vector<double> reference(const Operands& o, int32_t zero_point, bool with_bias, GemmActivation activation) {
  std::vector<double> out(static_cast<size_t>(o.m * o.n));
  for (int64_t i = 0; i < o.m; ++i) {
    for (int64_t j = 0; j < o.n; ++j) {
      int64_t sum = 0;
      for (int64_t c = 0; c < o.k; ++c) {
        sum += (int64_t{o.a[static_cast<size_t>(i * o.k + c)]} - zero_point) * o.b[static_cast<size_t>(j * o.k + c)];
      }
      const double z = static_cast<double>(sum) * o.scales[static_cast<size_t>(j)] +
                       (with_bias ? o.bias[static_cast<size_t>(j)] : 0.0);
      out[static_cast<size_t>(i * o.n + j)] = activate(activation, z);
    }
  }
  return out;
}

Tensor run(const Operands& o, int32_t zero_point, bool with_bias, GemmActivation activation, DType out_dtype,
           float out_scale = 0, int32_t out_zero_point = 0) {
  const Int8Gemm gemm{.m = o.m,
                      .n = o.n,
                      .k = o.k,
                      .a = o.a.data(),
                      .a_zero_point = zero_point,
                      .b = o.b.data(),
                      .scales = o.scales.data(),
                      .bias = with_bias ? o.bias.data() : nullptr,
                      .activation = activation,
                      .out_scale = out_scale,
                      .out_zero_point = out_zero_point};
  const Tensor out = empty({o.m, o.n}, out_dtype);
  kernels::cpu::int8_gemm(gemm, out);
  return out;
}

}  // namespace

// Catches: the zero point ignored or subtracted from the weights, a weight
// read as [k, n] instead of [n, k], the scale of the wrong column, the bias
// added before the scale, a sum saturating in 16 bits (full-range values:
// 255 x -128 pairs), a ragged tail of K or N dropped, and bf16 rounded twice.
TEST_CASE("int8 gemm gives the exact s32 sums, scaled, on both paths", "[kernels][cpu][int8]") {
  INFO("INT8 products native here: " << kernels::onednn_int8_native());
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const auto library : test::cpu_libraries()) {
    const test::UseLibrary use(library);
    for (const Shape3 s : {Shape3{37, 29, 70}, Shape3{1, 5, 3}, Shape3{64, 96, 256}}) {
      const Operands o = make_operands(s.m, s.n, s.k, 11);
      for (const int32_t zero_point : {0, 128, 3}) {
        for (const GemmActivation activation : {GemmActivation::None, GemmActivation::Relu, GemmActivation::GeluErf}) {
          for (const bool with_bias : {false, true}) {
            INFO(test::library_name(library)
                 << " [" << s.m << ", " << s.k << "] x [" << s.k << ", " << s.n << "], zero point " << zero_point
                 << ", activation " << static_cast<int>(activation) << (with_bias ? ", bias" : ""));
            const std::vector<double> want = reference(o, zero_point, with_bias, activation);
            // f32: the s32 -> f32 conversion, the scaling, bias and activation, a few f32 roundings.
            CHECK(test::relative_error(run(o, zero_point, with_bias, activation, kF32), want) < 1e-6);
            // bf16: rounded once, within half a bf16 ulp (2^-9) of the largest output, plus the f32 part.
            CHECK(test::relative_error(run(o, zero_point, with_bias, activation, kBF16), want) < 2.0 / 512);
          }
        }
      }
    }
  }
}

// Catches: an empty K writing garbage instead of the bias, and bad requests
// (an f16 or strided out, a zero point outside u8, missing scales) reaching
// the kernels instead of a clear error.
TEST_CASE("int8 gemm: K = 0 gives the bias, bad requests are refused", "[kernels][cpu][int8]") {
  const Operands o = make_operands(3, 4, 0, 5);
  const std::vector<double> got = test::as_f64(run(o, 7, true, GemmActivation::None, kF32));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) CHECK(got[static_cast<size_t>(i * 4 + j)] == o.bias[static_cast<size_t>(j)]);
  }
  const Operands p = make_operands(2, 3, 4, 6);
  CHECK_THROWS_WITH(run(p, 0, false, GemmActivation::None, kF16), Catch::Contains("f32, bf16 or u8"));
  CHECK_THROWS_WITH(run(p, 256, false, GemmActivation::None, kF32), Catch::Contains("zero point"));
  Int8Gemm no_scales{2, 3, 4, p.a.data(), 0, p.b.data(), nullptr, nullptr, GemmActivation::None};
  CHECK_THROWS_WITH(kernels::cpu::int8_gemm(no_scales, empty({2, 3})), Catch::Contains("scale per output column"));
  const Int8Gemm ok{2, 3, 4, p.a.data(), 0, p.b.data(), p.scales.data(), nullptr, GemmActivation::None};
  CHECK_THROWS_WITH(kernels::cpu::int8_gemm(ok, empty({3, 2}).t()), Catch::Contains("contiguous"));
}

// A u8 out is the f32 out requantized (kernels/quantize/math.h's
// quantize_value with out_scale and out_zero_point), on both paths, the
// ReLU applied before it. Catches requantizing with the input's zero point
// or a per-column scale instead of out_scale, the ReLU applied after the
// requantization (a zero point of 128 would let negatives through), rows
// of a thread's block written at the wrong offset, and a bad out_scale or
// zero point reaching the kernel.
TEST_CASE("int8 gemm into u8 is the f32 result requantized", "[kernels][cpu][int8]") {
  for (const auto library : test::cpu_libraries()) {
    const test::UseLibrary use(library);
    // Enough rows (2100 x 48 outputs) for the epilogue to split them over two threads.
    const Operands o = make_operands(2100, 48, 70, 12);
    for (const GemmActivation activation : {GemmActivation::None, GemmActivation::Relu}) {
      for (const int32_t out_zero_point : {128, 0, 17}) {
        INFO(test::library_name(library) << " activation " << static_cast<int>(activation) << ", out zero point "
                                         << out_zero_point);
        const float out_scale = 0.0173f;
        const Tensor f32 = run(o, 5, true, activation, kF32);
        const Tensor u8 = run(o, 5, true, activation, kU8, out_scale, out_zero_point);
        const float* v = f32.data<float>();
        const auto* q = static_cast<const uint8_t*>(u8.data_ptr());
        int mismatches = 0;
        for (int64_t i = 0; i < o.m * o.n; ++i) {
          mismatches += q[i] != kernels::quantize_value(v[i], out_scale, out_zero_point, 0, 255);
        }
        CHECK(mismatches == 0);
      }
    }
  }
  const Operands p = make_operands(2, 3, 4, 6);
  CHECK_THROWS_WITH(run(p, 0, false, GemmActivation::None, kU8, 0.0f, 128), Catch::Contains("finite positive scale"));
  CHECK_THROWS_WITH(run(p, 0, false, GemmActivation::None, kU8, 0.5f, 300), Catch::Contains("zero point in [0, 255]"));
}
