// The CPU elementwise kernels' 16-bit block path (kernels/elementwise/cpu.cpp:
// contiguous bf16 or f16 read and written a block at a time through f32
// buffers) must give exactly what the general path gives (the whole tensor
// gathered to f32, the formula, one rounding on store), in both dtypes.
// Sizes cross block and thread boundaries; an op in place and a scalar
// operand take the path, a shifted overlap does not.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "kernels/common/bf16x8.h"
#include "kernels/elementwise/elementwise.h"

using namespace mt;

namespace {

std::vector<uint16_t> bits(const Tensor& t) {
  REQUIRE((t.dtype() == kBF16 || t.dtype() == kF16));
  const Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.data_ptr());
  return {p, p + c.numel()};
}

// f on contiguous bf16 (the block path) against f on the same values seen
// through a strided view (the general path: gather to f32, the formula,
// scatter with one rounding): forward and backward must agree bit for bit.
void check_same_as_general_path(const char* name, const std::function<Tensor(const Tensor&)>& f, DType dtype) {
  for (const int64_t n : {int64_t{3}, int64_t{511}, int64_t{1537}, int64_t{70001}}) {
    INFO(name << ", " << dtype_name(dtype) << ", " << n << " elements");
    Generator gen(31);
    const Tensor x = mul(randn({n}, kF32, kCPU, &gen), 3.0).to(dtype);
    const Tensor r = randn({n}, kF32, kCPU, &gen);
    const Tensor contiguous = x.detach().requires_grad_();
    const Tensor pairs = x.unsqueeze(1).expand({n, 2}).contiguous().requires_grad_();
    const Tensor strided = pairs.select(1, 0);
    REQUIRE_FALSE(strided.is_contiguous());
    const Tensor y = f(contiguous), y_general = f(strided);
    CHECK(bits(y) == bits(y_general));
    sum(mul(y.to(kF32), r)).backward();
    sum(mul(y_general.to(kF32), r)).backward();
    CHECK(bits(contiguous.grad()) == bits(pairs.grad().select(1, 0)));
  }
}

}  // namespace

TEST_CASE(
    "bf16 and f16 elementwise ops on the CPU: the block path equals the general path bit for bit (block path bugs)",
    "[kernels][cpu][bf16]") {
  for (const DType dtype : {kBF16, kF16}) {
    check_same_as_general_path(
        "relu", [](const Tensor& x) { return relu(x); }, dtype);
    check_same_as_general_path(
        "gelu", [](const Tensor& x) { return gelu(x); }, dtype);
    check_same_as_general_path(
        "tanh", [](const Tensor& x) { return tanh(x); }, dtype);
    check_same_as_general_path(
        "x * 0.37 (a scalar operand)", [](const Tensor& x) { return mul(x, 0.37); }, dtype);
    check_same_as_general_path(
        "x * x + x", [](const Tensor& x) { return add(mul(x, x), x); }, dtype);
  }
}

namespace {

// ReLU on the bits of `specials` (48 values, then 3 more: a 16-lane tail)
// against the general path, forward and backward.
void check_relu_bits(DType dtype, const std::vector<uint16_t>& specials) {
  INFO(dtype_name(dtype));
  std::vector<uint16_t> values;
  for (int repeat = 0; repeat < 3; ++repeat) values.insert(values.end(), specials.begin(), specials.end());
  values.insert(values.end(), {specials[0], specials[3], specials[10]});
  const auto n = static_cast<int64_t>(values.size());
  const Tensor x = empty({n}, dtype);
  std::copy(values.begin(), values.end(), static_cast<uint16_t*>(x.data_ptr()));
  const Tensor contiguous = x.detach().requires_grad_();
  const Tensor pairs = x.unsqueeze(1).expand({n, 2}).contiguous().requires_grad_();
  const Tensor strided = pairs.select(1, 0);
  const Tensor y = relu(contiguous), y_general = relu(strided);
  CHECK(bits(y) == bits(y_general));
  const Tensor upstream = empty({n}, dtype);  // the values reversed: gradients with NaNs of their own
  std::copy(values.rbegin(), values.rend(), static_cast<uint16_t*>(upstream.data_ptr()));
  y.backward(upstream);
  y_general.backward(upstream);
  CHECK(bits(contiguous.grad()) == bits(pairs.grad().select(1, 0)));
}

// max_pool2d's gradient in dtype against the f32 one of the same values,
// rounded once (the general path: widened, added to zeros, narrowed), with
// upstream gradients cycling through `specials` (-0, NaNs, subnormals).
void check_max_pool_gradient_bits(DType dtype, const std::vector<uint16_t>& specials, int64_t kernel,
                                  int64_t stride, int64_t padding) {
  INFO(dtype_name(dtype) << ", kernel " << kernel << " stride " << stride);
  Generator gen(35);
  const Tensor x = randn({2, 3, 6, 8}, kF32, kCPU, &gen).to(dtype).requires_grad_();
  const Tensor y = max_pool2d(x, kernel, stride, padding);
  const Tensor upstream = empty(y.sizes(), dtype);
  auto* u = static_cast<uint16_t*>(upstream.data_ptr());
  for (int64_t i = 0; i < y.numel(); ++i) u[i] = specials[static_cast<size_t>(i) % specials.size()];
  y.backward(upstream);
  const Tensor x32 = x.detach().to(kF32).requires_grad_();
  max_pool2d(x32, kernel, stride, padding).backward(upstream.to(kF32));
  CHECK(bits(x.grad()) == bits(x32.grad().to(dtype)));
}

}  // namespace

// Windows that share no input element (2 x 2 / 2) copy bf16 and f16
// gradients to their places on the bits; overlapping ones (3 x 3 / 2) add
// in f32. Catches the copy keeping -0 (0 + -0 is +0), a NaN's payload the
// narrowing would not keep, and a gradient written to the wrong element.
TEST_CASE("bf16 and f16 max-pool gradients equal the f32 path's rounded, NaN, -0 and subnormals included",
          "[kernels][cpu][bf16]") {
  const std::vector<uint16_t> bf16 = {0x7fc1, 0xffc0, 0x7f81, 0x8000, 0x0000, 0x7f80, 0xff80, 0x0001,
                                      0x8001, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0xffff, 0x4049};
  const std::vector<uint16_t> f16 = {0x7e01, 0xfe00, 0x7c01, 0x8000, 0x0000, 0x7c00, 0xfc00, 0x0001,
                                     0x8001, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0xffff, 0x7d00, 0x4248};
  for (const auto& [kernel, stride, padding] : {std::tuple{2, 2, 0}, std::tuple{3, 2, 1}}) {
    check_max_pool_gradient_bits(kBF16, bf16, kernel, stride, padding);
    check_max_pool_gradient_bits(kF16, f16, kernel, stride, padding);
  }
}

// A contiguous bf16 or f16 ReLU selects on the bits (sixteen lanes at a
// time). Catches: a NaN passed through with its payload or sign (the general
// path rounds every NaN to 0x7fff), -0 kept as -0, a negative NaN taken for
// a negative number (zeroed) forward, or a NaN output dropping the gradient
// backward, f16 read with bf16's infinity (f16 values above 0x7c00 are NaN,
// not numbers), and the 16-lane loop's tail.
TEST_CASE("bf16 and f16 ReLU on the bits equal the general path for NaN, signed zeros, infinities and subnormals",
          "[kernels][cpu][bf16]") {
  check_relu_bits(kBF16, {0x7fc1, 0xffc0, 0x7f81, 0x8000, 0x0000, 0x7f80, 0xff80, 0x0001, 0x8001, 0x3f80, 0xbf80,
                          0x7f7f, 0xff7f, 0xffff, 0x7fff, 0x4049});
  check_relu_bits(kF16, {0x7e01, 0xfe00, 0x7c01, 0x8000, 0x0000, 0x7c00, 0xfc00, 0x0001, 0x8001, 0x3c00, 0xbc00, 0x7bff,
                         0xfbff, 0xffff, 0x7d00, 0x4248});
}

TEST_CASE("bf16 elementwise in place, and with an operand overlapping the output shifted (aliasing bugs)",
          "[kernels][cpu][bf16]") {
  Generator gen(32);
  const Tensor base = randn({4000}, kF32, kCPU, &gen).to(kBF16);
  // In place: out is the input itself.
  Tensor y = base.clone();
  kernels::unary(kernels::UnaryOp::Relu, y, y, {});
  CHECK(bits(y) == bits(relu(base)));
  // a[1:] = a[:-1] + a[:-1]: a block path would read, at the start of each
  // block, the value the previous block has just written; the kernel must see
  // the old values.
  Tensor a = base.clone();
  const Tensor want = add(base.slice(0, 0, 3999), base.slice(0, 0, 3999));
  kernels::binary(kernels::BinaryOp::Add, a.slice(0, 0, 3999), a.slice(0, 0, 3999), a.slice(0, 1, 4000));
  CHECK(bits(a.slice(0, 1, 4000)) == bits(want));
}

namespace {

// f on a contiguous bf16 [N, C, H, W] (rows widened on the fly) and on the
// same values through transposed views (the general path: the input and the
// incoming gradient gathered whole), forward and backward, bit for bit.
void check_rows_same_as_general_path(const char* name, const std::function<Tensor(const Tensor&)>& f, DType dtype,
                                     const Shape& shape = {6, 5, 9, 7}) {
  INFO(name << ", " << dtype_name(dtype));
  Generator gen(33);
  const Tensor x = randn(shape, kF32, kCPU, &gen).to(dtype);
  const Tensor contiguous = x.detach().requires_grad_();
  const Tensor transposed = x.transpose(2, 3).contiguous().requires_grad_();
  const Tensor y = f(contiguous), y_general = f(transposed.transpose(2, 3));
  CHECK(bits(y) == bits(y_general));
  const Tensor r = randn(y.sizes(), kF32, kCPU, &gen);
  sum(mul(y.to(kF32), r)).backward();
  // The transposes make the gradient reaching f's backward a strided view too.
  sum(mul(y_general.transpose(2, 3).contiguous().transpose(2, 3).to(kF32), r)).backward();
  CHECK(bits(contiguous.grad()) == bits(transposed.grad().transpose(2, 3)));
}

}  // namespace

TEST_CASE("bf16 and f16 batch norm and max-pool on the CPU: rows widened on the fly equal the general path (row bugs)",
          "[kernels][cpu][bf16]") {
  for (const DType dtype : {kBF16, kF16}) {
    check_rows_same_as_general_path(
        "batch_norm, training",
        [](const Tensor& x) { return batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5); }, dtype);
    check_rows_same_as_general_path(
        "max_pool2d 2x2", [](const Tensor& x) { return max_pool2d(x, 2, 2); }, dtype);
    // Even-width planes take the eight-lane 2 x 2 path (11 outputs a row: 8, then a tail of 3).
    check_rows_same_as_general_path("max_pool2d 2x2, eight lanes", [](const Tensor& x) { return max_pool2d(x, 2, 2); },
                                    dtype, {3, 4, 9, 22});
    check_rows_same_as_general_path(
        "max_pool2d 3x3 stride 2 padding 1", [](const Tensor& x) { return max_pool2d(x, 3, 2, 1); }, dtype);
  }
}

TEST_CASE(
    "bf16 and f16 batch norm on the CPU equal the f32 batch norm of the same values rounded once (row store bugs)",
    "[kernels][cpu][bf16]") {
  for (const DType dtype : {kBF16, kF16}) {
    INFO(dtype_name(dtype));
    Generator gen(34);
    const Tensor x = mul(randn({4, 3, 11, 13}, kF32, kCPU, &gen), 5.0).to(dtype);
    const auto bn = [](const Tensor& t) {
      return batch_norm(t, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    };
    CHECK(bits(bn(x)) == bits(bn(x.to(kF32)).to(dtype)));
  }
}

// With running statistics the input gradient is dy * w * invstd: the
// kernel's eight-lane path for it (f32, and bf16 and f16 rows read in
// place) and its tail (35 values a row: four lanes of 8, then 3). Catches
// that path dropping the scale, or applying the training formula.
TEST_CASE("CPU batch norm in eval mode: the input gradient is dy * weight / sqrt(running_var + eps) in f32, bf16, f16",
          "[kernels][cpu][bf16]") {
  for (const DType dtype : {kF32, kBF16, kF16}) {
    INFO(dtype_name(dtype));
    Generator gen(35);
    const Shape shape = {3, 4, 5, 7};
    const Tensor x = randn(shape, kF32, kCPU, &gen).to(dtype).detach().requires_grad_();
    const Tensor w = add(randn({4}, kF32, kCPU, &gen), 2.0).to(dtype), b = randn({4}, kF32, kCPU, &gen).to(dtype);
    const Tensor running_mean = randn({4}, kF32, kCPU, &gen);
    const Tensor running_var = add(mul(randn({4}, kF32, kCPU, &gen), randn({4}, kF32, kCPU, &gen)), 3.0).abs();
    const Tensor dy = randn(shape, kF32, kCPU, &gen).to(dtype);
    batch_norm(x, running_mean, running_var, w, b, /*training=*/false, 0.1, 1e-5).backward(dy);
    const Tensor scale = div(w.to(kF64), sqrt(add(running_var.to(kF64), 1e-5))).reshape({1, 4, 1, 1});
    const Tensor want = mul(dy.to(kF64), scale);
    const double tolerance = dtype == kF32 ? 1e-6 : dtype == kBF16 ? 8e-3 : 1e-3;  // one rounding of each value
    const Tensor error = div(sub(x.grad().to(kF64), want).abs(), add(want.abs(), 1e-30));
    CHECK(max(error).item<double>() < tolerance);
  }
}

#if defined(__AVX2__)
// kernels/common/bf16x8.h rounds eight lanes at a time where GCC leaves the
// scalar rounding's loops scalar. Catches: ties rounded away from even,
// the NaN select missing (a NaN rounded like a number can become inf), a
// signed compare taking negative NaNs for numbers, and the lane order of
// the 32-to-16-bit pack.
TEST_CASE("bf16x8 rounds eight lanes as f32_to_bf16_bits, ties, NaN and overflow included", "[cpu][bf16]") {
  const std::vector<uint32_t> cases = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7fc00001u, 0xffc00000u,
                                       0x7f800001u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00000001u, 0x80008000u,
                                       0x00000000u, 0x80000000u, 0x4049fdb0u, 0xc2c80000u};
  std::vector<float> values;
  for (const uint32_t c : cases) values.push_back(bits_float(c));
  for (size_t first = 0; first < values.size(); first += 8) {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), kernels::cpu::bf16_bits_x8(_mm256_loadu_ps(&values[first])));
    BFloat16 narrowed[8];
    kernels::cpu::narrow_bf16x8(&values[first], narrowed);
    for (size_t i = 0; i < 8; ++i) {
      INFO("f32 bits " << std::hex << cases[first + i]);
      CHECK(lanes[i] == f32_to_bf16_bits(values[first + i]));
      CHECK(narrowed[i].bits == f32_to_bf16_bits(values[first + i]));
    }
    const __m256 widened = kernels::cpu::widen_bf16x8(narrowed);
    alignas(32) float wide[8];
    _mm256_store_ps(wide, widened);
    for (size_t i = 0; i < 8; ++i) CHECK(float_bits(wide[i]) == static_cast<uint32_t>(narrowed[i].bits) << 16);
  }
}
#endif
