// INT8 quantize/dequantize kernels against an f64 model of the formula, on
// the CPU and on the CUDA path (sim here): rounding half to even, saturation
// at the dtype's ends, NaN to the zero point, and the channel of every
// element along the quantization axis.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu_library_util.h"
#include "kernels/quantize/quantize.h"
#include "kernels/sim_tensor_util.h"
#include "mixtape.h"

using namespace mt;

namespace {

// q = clamp(round_half_even(x / scale) + zero_point, lo, hi) in f64; NaN -> zero point.
double reference_quantize(double x, double scale, double zero_point, DType dtype) {
  const double lo = dtype == kU8 ? 0 : -127, hi = dtype == kU8 ? 255 : 127;
  if (std::isnan(x)) return zero_point;
  const double v = std::nearbyint(static_cast<double>(static_cast<float>(x) / static_cast<float>(scale)));
  return std::min(hi, std::max(lo, v + zero_point));
}

struct Case {
  Shape shape;
  int64_t axis;  // -1: per tensor
};

kernels::QuantizeAxis axis_of(const Case& c) {
  if (c.axis < 0) return {.channels = 1, .inner = shape_numel(c.shape)};
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(c.axis) + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
  return {.channels = c.shape[static_cast<size_t>(c.axis)], .inner = inner};
}

// Random values, and values past both ends, +-inf and NaN.
std::vector<double> inputs(int64_t n, unsigned seed) {
  std::vector<double> v = test::as_f64(test::random_tensor({n}, kF64, kCPU, seed, -3, 3));
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {1e6, -1e6, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i * 3 % v.size()] = specials[i];  // never where the ties go (i % 3 == 1)
  return v;
}

}  // namespace

// Catches: rounding half away from zero (2.5 -> 3), the zero point added
// after the clamp (u8 wrap past 255), saturation replaced by wrap-around
// (1e6 -> a small number), I8 clamped at -128 instead of -127, NaN written
// as a random byte, and per-channel scales applied along the wrong axis
// (the [3, 4, 5] case with axis 1 has a different channel for most elements
// on every other axis).
TEST_CASE("int8_quantize matches the f64 formula on both paths, per tensor and per channel",
          "[kernels][int8][quantize]") {
  const Case cases[] = {{{64}, -1}, {{3, 4, 5}, 1}, {{6, 7}, 0}, {{2, 9}, 1}};
  for (const Device device : {kCPU, test::kCudaPath}) {
    for (const Case& c : cases) {
      for (const DType dtype : {kI8, kU8}) {
        const kernels::QuantizeAxis axis = axis_of(c);
        std::vector<double> x = inputs(shape_numel(c.shape), 7);
        std::vector<double> scales, zero_points;
        for (int64_t ch = 0; ch < axis.channels; ++ch) {
          // Even channels: powers of two, so the ties below are exact; odd ones are not.
          scales.push_back(ch % 2 == 0 ? std::ldexp(1.0, -5 - static_cast<int>(ch % 3))
                                       : 0.017 * static_cast<double>(ch + 1));
          zero_points.push_back(dtype == kU8 ? static_cast<double>(100 + 20 * ch % 150)
                                             : static_cast<double>(ch % 5) - 2);
        }
        // Ties: x / scale = +-0.5, 1.5, 2.5 in even channels (half to even: 0, 2, 2).
        for (size_t i = 1; i < x.size(); i += 3) {
          const int64_t ch = axis.channel(static_cast<int64_t>(i));
          if (ch % 2 == 0)
            x[i] = (i % 2 == 0 ? 1 : -1) * (0.5 + static_cast<double>(i / 3 % 3)) * scales[static_cast<size_t>(ch)];
        }
        const Tensor out = empty(c.shape, dtype, device);
        kernels::int8_quantize(from_vector(x, c.shape, kF32, device),
                               from_vector(scales, {axis.channels}, kF32, device),
                               from_vector(zero_points, {axis.channels}, kI32, device), axis, out);
        const std::vector<double> got = test::as_f64(out.to(kCPU));
        INFO(fmt::format("{} {} {} axis {}", device, dtype, shape_str(c.shape), c.axis));
        for (size_t i = 0; i < x.size(); ++i) {
          const int64_t ch = axis.channel(static_cast<int64_t>(i));
          INFO("element " << i << " x = " << x[i] << " channel " << ch);
          REQUIRE(got[i] == reference_quantize(x[i], scales[static_cast<size_t>(ch)],
                                               zero_points[static_cast<size_t>(ch)], dtype));
        }
      }
    }
  }
}

// Catches: the zero point added instead of subtracted, the wrong channel's
// scale, and bf16 output rounded twice (through an f16 or from an already
// rounded f32 quotient): every value is (q - z) * s, exact in f32 here.
TEST_CASE("int8_dequantize gives (q - zero_point) * scale rounded once", "[kernels][int8][quantize]") {
  const Case c{{5, 4}, 1};
  const kernels::QuantizeAxis axis = axis_of(c);
  for (const Device device : {kCPU, test::kCudaPath}) {
    for (const DType dtype : {kI8, kU8}) {
      std::vector<double> q;
      for (int64_t i = 0; i < 20; ++i)
        q.push_back(dtype == kU8 ? static_cast<double>(i * 13 % 256) : static_cast<double>(i * 13 % 255 - 127));
      const std::vector<double> scales = {0.5, 0.1, 3.0, 0.007};
      const std::vector<double> zero_points = {dtype == kU8 ? 128.0 : 0.0, 3, 0, dtype == kU8 ? 255.0 : -127.0};
      for (const DType out_dtype : {kF32, kBF16}) {
        const Tensor out = empty(c.shape, out_dtype, device);
        kernels::int8_dequantize(from_vector(q, c.shape, dtype, device), from_vector(scales, {4}, kF32, device),
                                 from_vector(zero_points, {4}, kI32, device), axis, out);
        const std::vector<double> got = test::as_f64(out.to(kCPU));
        for (size_t i = 0; i < q.size(); ++i) {
          const size_t ch = static_cast<size_t>(axis.channel(static_cast<int64_t>(i)));
          const float want = static_cast<float>(q[i] - zero_points[ch]) * static_cast<float>(scales[ch]);
          INFO(fmt::format("{} {} -> {} element {}", device, dtype, out_dtype, i));
          CHECK(got[i] == test::as_f64(scalar_tensor(want, out_dtype))[0]);
        }
      }
    }
  }
}

// Catches: mismatched scales or zero points reaching a kernel that would
// read past them, and a float or strided output written as bytes.
TEST_CASE("int8_quantize refuses operands that do not fit together", "[kernels][int8][quantize]") {
  const Tensor x = ones({4, 3});
  const kernels::QuantizeAxis per_row{.channels = 4, .inner = 3};
  CHECK_THROWS_WITH(kernels::int8_quantize(x, ones({3}), zeros({4}, kI32), per_row, empty({4, 3}, kI8)),
                    Catch::Contains("4 contiguous f32"));
  CHECK_THROWS_WITH(kernels::int8_quantize(x, ones({4}), zeros({4}, kI64), per_row, empty({4, 3}, kI8)),
                    Catch::Contains("i32"));
  CHECK_THROWS_WITH(kernels::int8_quantize(x, ones({4}), zeros({4}, kI32), per_row, empty({4, 3}, kF16)),
                    Catch::Contains("i8 or u8"));
  CHECK_THROWS_WITH(kernels::int8_quantize(x, ones({4}), zeros({4}, kI32), per_row, empty({3, 4}, kI8).t()),
                    Catch::Contains("contiguous"));
}
