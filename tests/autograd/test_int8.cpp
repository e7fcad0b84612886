// INT8 tensors and the INT8 Linear (autograd/int8.h): per-channel symmetric
// weights, the checks a loaded checkpoint's scales go through, and the W8A8
// Linear against integer arithmetic done here.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/int8.h"
#include "kernels/cpu_library_util.h"
#include "kernels/quantize/math.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"

using namespace mt;
using Catch::Contains;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(kCPU).to_vector(); }

}  // namespace

// Catches: a row's scale from the whole tensor's amax (per tensor instead of
// per channel), scales along the input axis, 128 levels instead of 127, and
// an all-zero row divided by a zero scale (NaN bytes).
TEST_CASE("int8 per-channel symmetric weights: each row's max maps to 127", "[autograd][int8]") {
  std::vector<double> w = {0.5,  -0.25, 0.125, 0.0,   // row 0: amax 0.5
                           -4.0, 1.0,   3.0,   2.0,   // row 1: amax 4
                           0.0,  0.0,   0.0,   0.0};  // row 2: all zero
  const Tensor weight = from_vector(w, {3, 4});
  const int8::Int8Tensor q = int8::quantize_per_channel_symmetric(weight);
  CHECK(q.data.dtype() == kI8);
  CHECK(q.axis == 0);
  const std::vector<double> scales = values(q.scales);
  REQUIRE(scales.size() == 3);
  CHECK(scales[0] == Approx(0.5 / 127).epsilon(1e-6));
  CHECK(scales[1] == Approx(4.0 / 127).epsilon(1e-6));
  CHECK(scales[2] == 1.0);
  const std::vector<double> got = values(q.data);
  const std::vector<double> want = {127, -64, 32, 0, -127, 32, 95, 64, 0, 0, 0, 0};  // 31.75 -> 32, 95.25 -> 95
  CHECK(got == want);
  const std::vector<double> back = values(int8::dequantize(q));
  for (size_t i = 0; i < w.size(); ++i) CHECK(std::abs(back[i] - w[i]) <= scales[i / 4] / 2 + 1e-7);
}

// Catches: a hostile checkpoint's zero, negative or NaN scale, or an
// out-of-range zero point, reaching a kernel (divide by zero, garbage bytes)
// instead of an error that names the channel.
TEST_CASE("int8 tensors with bad scales or zero points are refused", "[autograd][int8]") {
  const Tensor x = ones({2, 3});
  const Tensor z = zeros({2}, kI32);
  for (const double bad :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CHECK_THROWS_WITH(int8::quantize(x, from_vector(std::vector<double>{1.0, bad}, {2}), z, 0),
                      Contains("channel 1 is not a finite positive number"));
  }
  CHECK_THROWS_WITH(int8::quantize(x, ones({2}), from_vector(std::vector<double>{0, 128}, {2}, kI32), 0),
                    Contains("outside i8's [-127, 127]"));
  CHECK_THROWS_WITH(int8::quantize_per_tensor(x, 0.1, 256, kU8), Contains("outside u8's [0, 255]"));
  CHECK_THROWS_WITH(int8::quantize(x, ones({3}), zeros({3}, kI32), 0), Contains("expected 2 f32 scale(s)"));
  Tensor tracked = ones({2, 3});
  tracked.requires_grad_();
  CHECK_THROWS_WITH(int8::quantize_per_tensor(tracked, 0.1, 0), Contains("records nothing on the tape"));
}

namespace {

// y = act(s_x * s_w[n] * sum_k (q_x - z) q_w + b[n]) with q_x and q_w from the formula, in f64;
// q_x = quantize(x / smooth[k] with s_x) when `smooth` is given (SmoothQuant: scale s_x * smooth[k]).
std::vector<double> reference_linear(const std::vector<double>& x, int64_t m, int64_t k, const int8::Int8Tensor& w,
                                     double s_x, int32_t z, const std::vector<double>& bias, bool relu,
                                     const std::vector<double>& smooth = {}) {
  const std::vector<double> qw = values(w.data), sw = values(w.scales);
  const int64_t n = w.data.size(0);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        const float channel_scale = smooth.empty()
                                        ? static_cast<float>(s_x)
                                        : static_cast<float>(s_x) * static_cast<float>(smooth[static_cast<size_t>(c)]);
        const float quotient = static_cast<float>(x[static_cast<size_t>(i * k + c)]) / channel_scale;
        const int64_t qx =
            std::min<int64_t>(255, std::max<int64_t>(0, static_cast<int64_t>(std::nearbyint(quotient)) + z));
        sum += (qx - z) * static_cast<int64_t>(qw[static_cast<size_t>(j * k + c)]);
      }
      double v = static_cast<double>(sum) * s_x * sw[static_cast<size_t>(j)] + bias[static_cast<size_t>(j)];
      y[static_cast<size_t>(i * n + j)] = relu ? std::max(0.0, v) : v;
    }
  }
  return y;
}

}  // namespace

// Catches: the epilogue scaled by the weight's scale only (the input's
// forgotten: requantizing with the wrong scale), the zero point not
// subtracted, inputs past the calibrated range wrapping instead of
// saturating (x reaches 4x the range here), the bias or ReLU dropped, and a
// 3-D input's rows mixed up.
TEST_CASE("int8 linear equals integer arithmetic on quantized inputs and weights", "[autograd][int8]") {
  const int64_t m = 6, k = 37, n = 5;
  const std::vector<double> x = test::random_tensor({m * k}, kF64, kCPU, 3, -4, 4).to_vector();
  const Tensor weight = test::random_tensor({n, k}, kF32, kCPU, 4);
  const std::vector<double> bias = test::random_tensor({n}, kF64, kCPU, 5).to_vector();
  const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(weight);
  const double s_x = 1.0 / 127;  // calibrated for |x| <= 1: most inputs saturate
  for (const int32_t z : {128, 90}) {
    for (const bool relu : {false, true}) {
      const Tensor y =
          int8::linear(from_vector(x, {2, 3, k}), w, {scalar_tensor(s_x), scalar_tensor(z, kI32), Tensor()},
                       from_vector(bias, {n}), relu ? LinearActivation::Relu : LinearActivation::None);
      CHECK(y.sizes() == Shape{2, 3, n});
      CHECK(y.dtype() == kF32);
      const std::vector<double> want = reference_linear(x, m, k, w, s_x, z, bias, relu);
      const std::vector<double> got = values(y);
      INFO("zero point " << z << (relu ? " relu" : ""));
      for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5).epsilon(1e-5));
    }
  }
  const Tensor y16 =
      int8::linear(from_vector(x, {m, k}, kBF16), w, {scalar_tensor(s_x), scalar_tensor(128, kI32), Tensor()});
  CHECK(y16.dtype() == kBF16);
}

// Catches: SmoothQuant's factors ignored by the INT8 path, applied as
// multipliers instead of divisors, or along the output axis; and the
// per-input-channel quantize taking the wrong column's scale.
TEST_CASE("int8 linear with SmoothQuant divides each input channel by its factor in the quantize", "[autograd][int8]") {
  const int64_t m = 5, k = 19, n = 4;
  const std::vector<double> x = test::random_tensor({m * k}, kF64, kCPU, 13, -2, 2).to_vector();
  const std::vector<double> smooth = test::random_tensor({k}, kF64, kCPU, 14, 0.25, 4).to_vector();
  const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(test::random_tensor({n, k}, kF32, kCPU, 15));
  const std::vector<double> bias(static_cast<size_t>(n), 0.0);
  const double s_x = 0.02;
  const Tensor y =
      int8::linear(from_vector(x, {m, k}), w, {scalar_tensor(s_x), scalar_tensor(128, kI32), from_vector(smooth, {k})});
  const std::vector<double> want = reference_linear(x, m, k, w, s_x, 128, bias, false, smooth);
  const std::vector<double> got = values(y);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5).epsilon(1e-5));
}

// Catches: padding read as raw 0 instead of the zero point (a band of
// wrong outputs at every border), a weight's [O, C, kH, kW] flattened in
// another order than the patches, stride or dilation applied to the wrong
// axis, the NCHW write-back transposed, and the bias or input scale lost.
TEST_CASE("int8 conv2d equals integer arithmetic on quantized patches, padding at the zero point", "[autograd][int8]") {
  struct Geometry {
    int64_t n, c, h, w, o, kh, kw;
    Size2 stride, padding, dilation;
  };
  // oneDNN's INT8 convolution where the CPU has native INT8 products, and the im2row + INT8 GEMM path.
  // The third: 20 channels x 35 positions, so oneDNN's channels-last sums
  // are read back through whole 8 x 8 register transposes and both ragged
  // edges (catches a shuffle picking the wrong lanes).
  for (const auto library : test::cpu_libraries()) {
    const test::UseLibrary use(library);
    INFO(test::library_name(library));
    for (const Geometry& g :
         {Geometry{2, 3, 7, 6, 4, 3, 3, 1, 1, 1}, Geometry{1, 2, 9, 8, 3, 3, 2, {2, 1}, {1, 2}, {1, 2}},
          Geometry{2, 3, 5, 7, 20, 3, 3, 1, 1, 1}}) {
      const std::vector<double> x = test::random_tensor({g.n * g.c * g.h * g.w}, kF64, kCPU, 21, -2, 2).to_vector();
      const Tensor weight = test::random_tensor({g.o, g.c, g.kh, g.kw}, kF32, kCPU, 22);
      const std::vector<double> bias = test::random_tensor({g.o}, kF64, kCPU, 23).to_vector();
      const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(weight);
      const std::vector<double> qw = values(w.data), sw = values(w.scales);
      const double s_x = 1.5 / 127;  // |x| up to 2: some inputs saturate
      const int32_t z = 128;
      const Tensor y =
          int8::conv2d(from_vector(x, {g.n, g.c, g.h, g.w}), w, {scalar_tensor(s_x), scalar_tensor(z, kI32), Tensor()},
                       from_vector(bias, {g.o}), g.stride, g.padding, g.dilation);
      const int64_t oh = (g.h + 2 * g.padding.h - g.dilation.h * (g.kh - 1) - 1) / g.stride.h + 1;
      const int64_t ow = (g.w + 2 * g.padding.w - g.dilation.w * (g.kw - 1) - 1) / g.stride.w + 1;
      REQUIRE(y.sizes() == Shape{g.n, g.o, oh, ow});
      const std::vector<double> got = values(y);
      auto qx = [&](int64_t n, int64_t c, int64_t iy, int64_t ix) -> int64_t {
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return z;
        const float q =
            static_cast<float>(x[static_cast<size_t>(((n * g.c + c) * g.h + iy) * g.w + ix)]) / static_cast<float>(s_x);
        return std::min<int64_t>(255, std::max<int64_t>(0, static_cast<int64_t>(std::nearbyint(q)) + z));
      };
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t o = 0; o < g.o; ++o) {
          for (int64_t oy = 0; oy < oh; ++oy) {
            for (int64_t ox = 0; ox < ow; ++ox) {
              int64_t sum = 0;
              for (int64_t c = 0; c < g.c; ++c) {
                for (int64_t i = 0; i < g.kh; ++i) {
                  for (int64_t j = 0; j < g.kw; ++j) {
                    const int64_t iy = oy * g.stride.h - g.padding.h + i * g.dilation.h;
                    const int64_t ix = ox * g.stride.w - g.padding.w + j * g.dilation.w;
                    sum += (qx(n, c, iy, ix) - z) *
                           static_cast<int64_t>(qw[static_cast<size_t>(((o * g.c + c) * g.kh + i) * g.kw + j)]);
                  }
                }
              }
              const double want =
                  static_cast<double>(sum) * s_x * sw[static_cast<size_t>(o)] + bias[static_cast<size_t>(o)];
              INFO("n " << n << " o " << o << " at " << oy << ", " << ox);
              CHECK(got[static_cast<size_t>(((n * g.o + o) * oh + oy) * ow + ox)] ==
                    Approx(want).margin(1e-5).epsilon(1e-5));
            }
          }
        }
      }
    }
  }
}

// Requantized outputs and u8 inputs (int8::Requantization): a conv2d or
// linear into u8 is its f32 result with the ReLU, requantized; a u8 input
// is taken as quantized already with the layer's input scale. On both CPU
// paths (oneDNN, and im2row with the INT8 GEMM). Catches the ReLU dropped
// or applied after the requantization, the consumer's scale confused with
// the layer's own, a u8 input quantized a second time, and a requantization
// asked of a device that cannot do it reaching its kernels.
TEST_CASE("int8 conv2d and linear requantize into u8 and take u8 as quantized", "[autograd][int8]") {
  const int8::InputQuantization input{scalar_tensor(1.5 / 127), scalar_tensor(128, kI32), Tensor()};
  const int8::Requantization out{.scale = 0.021, .zero_point = 128, .relu = true};
  auto requantized = [&](const Tensor& f32) {
    const std::vector<double> v = values(f32);
    std::vector<double> q;
    for (const double value : v) {
      q.push_back(kernels::quantize_value(std::max(static_cast<float>(value), 0.0f), static_cast<float>(out.scale),
                                          out.zero_point, 0, 255));
    }
    return q;
  };
  for (const auto library : test::cpu_libraries()) {
    const test::UseLibrary use(library);
    INFO(test::library_name(library));
    const Tensor x = test::random_tensor({2, 3, 9, 8}, kF32, kCPU, 41, -2, 2);
    const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(test::random_tensor({5, 3, 3, 3}, kF32, kCPU, 42));
    const Tensor bias = test::random_tensor({5}, kF32, kCPU, 43);
    const Tensor y = int8::conv2d(x, w, input, bias, 1, 1, 1);
    const Tensor q = int8::conv2d(x, w, input, bias, 1, 1, 1, out);
    REQUIRE(q.dtype() == kU8);
    CHECK(values(q) == requantized(y));
    const Tensor x_u8 = int8::quantize_per_tensor(x, 1.5 / 127, 128, kU8).data;
    CHECK(values(int8::conv2d(x_u8, w, input, bias, 1, 1, 1)) == values(y));

    const Tensor a = test::random_tensor({7, 24}, kF32, kCPU, 44, -2, 2);
    const int8::Int8Tensor wl = int8::quantize_per_channel_symmetric(test::random_tensor({11, 24}, kF32, kCPU, 45));
    const Tensor z = int8::linear(a, wl, input, Tensor());
    const Tensor zq = int8::linear(a, wl, input, Tensor(), LinearActivation::None, out);
    REQUIRE(zq.dtype() == kU8);
    CHECK(values(zq) == requantized(z));
    CHECK(values(int8::linear(int8::quantize_per_tensor(a, 1.5 / 127, 128, kU8).data, wl, input)) == values(z));
  }
  const int8::Int8Tensor wl = int8::quantize_per_channel_symmetric(test::random_tensor({3, 4}, kF32, kCPU, 46));
  const int8::InputQuantization on_sim{scalar_tensor(0.1, kF32, test::kCudaPath),
                                       scalar_tensor(128, kI32, test::kCudaPath), Tensor()};
  const int8::Int8Tensor wl_sim{wl.data.to(test::kCudaPath), wl.scales.to(test::kCudaPath),
                                wl.zero_points.to(test::kCudaPath), 0};
  CHECK_THROWS_WITH(int8::linear(test::random_tensor({2, 4}, kF32, test::kCudaPath, 47), wl_sim, on_sim, Tensor(),
                                 LinearActivation::None, out),
                    Contains("the CPU's only"));
}

// Catches, on the CUDA path (the INT8 Tensor Core rung, v9): a fragment
// byte in the wrong row or column of the mma tile, the zero point's
// correction (z * the column's weight sum) taken from the wrong column or
// lane, ragged M, N or K edges reading past a row or dropping its tail, and
// the bf16 store. The CPU path is the reference (itself checked against
// integer arithmetic above); both sums are exact, so they agree to rounding.
TEST_CASE("int8 linear on the CUDA path matches the CPU's", "[autograd][int8][sim]") {
  struct Shape3 {
    int64_t m, k, n;
  };
  for (const Shape3 s : {Shape3{70, 100, 45}, Shape3{3, 37, 5}, Shape3{64, 64, 32}}) {
    const Tensor x = test::random_tensor({s.m, s.k}, kF32, kCPU, 31, -3, 3);
    const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(test::random_tensor({s.n, s.k}, kF32, kCPU, 32));
    const Tensor bias = test::random_tensor({s.n}, kF32, kCPU, 33);
    const int8::Int8Tensor wd{.data = w.data.to(test::kCudaPath),
                              .scales = w.scales.to(test::kCudaPath),
                              .zero_points = w.zero_points.to(test::kCudaPath),
                              .axis = 0};
    for (const int32_t z : {128, 90}) {
      for (const DType dtype : {kF32, kBF16}) {
        const int8::InputQuantization cpu_input{scalar_tensor(2.5 / 127), scalar_tensor(z, kI32), Tensor()};
        const int8::InputQuantization device_input{scalar_tensor(2.5 / 127, kF32, test::kCudaPath),
                                                   scalar_tensor(z, kI32, test::kCudaPath), Tensor()};
        const Tensor want = int8::linear(x.to(dtype), w, cpu_input, bias, LinearActivation::Relu);
        const Tensor got = int8::linear(x.to(dtype).to(test::kCudaPath), wd, device_input, bias.to(test::kCudaPath),
                                        LinearActivation::Relu);
        INFO(fmt::format("[{}, {}] x [{}, {}], zero point {}, {}", s.m, s.k, s.n, s.k, z, dtype));
        REQUIRE(got.dtype() == dtype);
        const std::vector<double> g = values(got), e = values(want);
        for (size_t i = 0; i < e.size(); ++i) {
          CHECK(g[i] == Approx(e[i]).margin(dtype == kBF16 ? 1e-2 : 1e-5).epsilon(dtype == kBF16 ? 8e-3 : 1e-5));
        }
      }
    }
  }
}

// Catches, on the CUDA path: the device im2row reading a tap from the
// wrong channel, row or column (or padding with raw 0 instead of the zero
// point), and the [N*OH*OW, O] product copied into NCHW transposed. The
// CPU's INT8 convolution is the reference (checked against integer
// arithmetic above).
TEST_CASE("int8 conv2d on the CUDA path matches the CPU's", "[autograd][int8][sim]") {
  const Tensor x = test::random_tensor({2, 3, 9, 8}, kF32, kCPU, 41, -2, 2);
  const int8::Int8Tensor w = int8::quantize_per_channel_symmetric(test::random_tensor({5, 3, 3, 2}, kF32, kCPU, 42));
  const Tensor bias = test::random_tensor({5}, kF32, kCPU, 43);
  const int8::Int8Tensor wd{.data = w.data.to(test::kCudaPath),
                            .scales = w.scales.to(test::kCudaPath),
                            .zero_points = w.zero_points.to(test::kCudaPath),
                            .axis = 0};
  const int8::InputQuantization cpu_input{scalar_tensor(1.5 / 127), scalar_tensor(128, kI32), Tensor()};
  const int8::InputQuantization device_input{scalar_tensor(1.5 / 127, kF32, test::kCudaPath),
                                             scalar_tensor(128, kI32, test::kCudaPath), Tensor()};
  const Size2 stride{2, 1}, padding{1, 2}, dilation{1, 2};
  const std::vector<double> want = values(int8::conv2d(x, w, cpu_input, bias, stride, padding, dilation));
  const Tensor got =
      int8::conv2d(x.to(test::kCudaPath), wd, device_input, bias.to(test::kCudaPath), stride, padding, dilation);
  CHECK(got.device() == test::kCudaPath);
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(g[i] == Approx(want[i]).margin(1e-5).epsilon(1e-5));
}
