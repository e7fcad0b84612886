// The CPU convolution's two back ends (kernels/conv/cpu.cpp: oneDNN for f32
// and bf16 where the build has it, im2col + Eigen otherwise), forward and
// backward, against the f64 convolution (itself checked against a direct
// loop and finite differences in tests/autograd/test_ops_conv.cpp): strides,
// padding, dilation, groups, pointwise and rectangular kernels, with and
// without bias, bf16 rounded once.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "kernels/common/cpu_backend.h"
#include "tests/kernels/cpu_library_util.h"

using namespace mt;
using kernels::CpuGemmLibrary;
using test::as_f64;
using test::relative_error;
using test::UseLibrary;

namespace {

struct Case {
  const char* name;
  Shape x, w;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// y, dx, dw, db of sum(conv2d(x, w, b) * r), the inputs in `dtype`.
std::vector<Tensor> run(const Case& c, DType dtype, const Tensor& x, const Tensor& w, const Tensor& b,
                        const Tensor& r) {
  const Tensor xi = x.to(dtype).detach().requires_grad_(), wi = w.to(dtype).detach().requires_grad_();
  const Tensor bi = c.bias ? b.to(dtype).detach().requires_grad_() : Tensor();
  const Tensor y = conv2d(xi, wi, bi, c.stride, c.padding, c.dilation, c.groups);
  sum(mul(y.to(kF64), r)).backward();
  return {y, xi.grad(), wi.grad(), c.bias ? bi.grad() : Tensor()};
}

}  // namespace

TEST_CASE("CPU conv2d forward and backward in f32 and bf16 match f64 with oneDNN and Eigen (layout and padding bugs)",
          "[kernels][conv][cpu]") {
  const std::vector<Case> cases = {
      {"3x3 same padding, bias", {4, 3, 9, 9}, {8, 3, 3, 3}, 1, 1, 1, 1, true},
      {"stride 2, padding 1, dilation 2", {3, 16, 11, 11}, {32, 16, 3, 3}, 2, 1, 2, 1, false},
      {"groups 4, bias", {2, 16, 8, 8}, {24, 4, 3, 3}, 1, 1, 1, 4, true},
      {"1x1 pointwise", {2, 32, 7, 7}, {16, 32, 1, 1}, 1, 0, 1, 1, true},
      {"rectangular kernel, uneven stride and padding", {2, 5, 12, 9}, {7, 5, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 1, true},
      {"floor-rounded output (stride leaves the last row unused)", {2, 4, 10, 10}, {8, 4, 3, 3}, 3, 0, 1, 1, false},
      // The weight gradient's 8 chunks of 1 or 2 samples read views of the
      // whole batch in oneDNN's channel-blocked layout: a chunk's offset.
      {"13 samples in uneven weight-gradient chunks, 16 channels", {13, 16, 6, 6}, {16, 16, 3, 3}, 1, 1, 1, 1, false},
      // nChw16c pads 24 channels to 32, zeros oneDNN's reorder must write:
      // the fast NCHW <-> nChw16c copy (kernels/common/channel_blocks.h) must not take it.
      {"24 channels, a padded last channel block", {3, 24, 7, 7}, {24, 24, 3, 3}, 1, 1, 1, 1, false},
  };
  for (const DType dtype : {kF32, kBF16}) {
    for (const Case& c : cases) {
      Generator gen(21);
      // Values exactly representable in dtype, so f64 sees the same operands.
      const Tensor x = randn(c.x, kF32, kCPU, &gen).to(dtype).to(kF64);
      const Tensor w = randn(c.w, kF32, kCPU, &gen).to(dtype).to(kF64);
      const Tensor b = randn({c.w[0]}, kF32, kCPU, &gen).to(dtype).to(kF64);
      const Shape y_shape = conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups).sizes();
      const Tensor r = randn(y_shape, kF32, kCPU, &gen).to(dtype).to(kF64);
      const std::vector<Tensor> exact = run(c, kF64, x, w, b, r);
      for (const CpuGemmLibrary library : test::cpu_libraries()) {
        INFO(test::library_name(library) << " " << dtype_name(dtype) << " " << c.name);
        const UseLibrary use(library);
        const std::vector<Tensor> got = run(c, dtype, x, w, b, r);
        // f32: the sums' own rounding; bf16: one rounding of each output (2^-8 relative).
        const double tolerance = dtype == kF32 ? 2e-5 : 8e-3;
        CHECK(relative_error(got[0], as_f64(exact[0])) < tolerance);
        CHECK(relative_error(got[1], as_f64(exact[1])) < tolerance);
        CHECK(relative_error(got[2], as_f64(exact[2])) < tolerance);
        if (c.bias) CHECK(relative_error(got[3], as_f64(exact[3])) < tolerance);
        CHECK(got[0].dtype() == dtype);
        CHECK(got[2].dtype() == dtype);
      }
    }
  }
}

// f16 runs through the f32 primitives on exactly widened operands
// (onednn::compute_dtype), so it must give the f32 convolution of the same
// values rounded once, bit for bit. Catches an f16 tensor handed to an f32
// primitive unconverted, and a weight gradient rounded per chunk.
TEST_CASE("CPU conv2d: MT_CPU_GEMM=onednn runs oneDNN's convolution for f32, bf16 and f16 and refuses f64",
          "[kernels][conv][cpu]") {
  if (!kernels::onednn_built()) return;  // this build has no oneDNN: nothing to check
  const UseLibrary use(CpuGemmLibrary::OneDnn);
  Generator gen(22);
  for (const DType dtype : {kF32, kBF16, kF16}) {
    const Tensor x = randn({2, 3, 6, 6}, kF32, kCPU, &gen).to(dtype);
    const Tensor w = randn({4, 3, 3, 3}, kF32, kCPU, &gen).to(dtype);
    CHECK_NOTHROW(conv2d(x, w, Tensor(), 1, 1));
  }
  const Tensor x16 = randn({9, 3, 6, 6}, kF32, kCPU, &gen).to(kF16).requires_grad_();
  const Tensor w16 = randn({4, 3, 3, 3}, kF32, kCPU, &gen).to(kF16).requires_grad_();
  const Tensor x32 = x16.detach().to(kF32).requires_grad_(), w32 = w16.detach().to(kF32).requires_grad_();
  const Tensor y16 = conv2d(x16, w16, Tensor(), 1, 1), y32 = conv2d(x32, w32, Tensor(), 1, 1);
  CHECK(y16.to_vector() == y32.to(kF16).to_vector());
  const Tensor up = randn({9, 4, 6, 6}, kF32, kCPU, &gen);
  sum(mul(y16, up.to(kF16))).backward();
  sum(mul(y32, up.to(kF16).to(kF32))).backward();
  CHECK(x16.grad().to_vector() == x32.grad().to(kF16).to_vector());
  CHECK(w16.grad().to_vector() == w32.grad().to(kF16).to_vector());
  const Tensor x = randn({2, 3, 6, 6}, kF64, kCPU, &gen), w = randn({4, 3, 3, 3}, kF64, kCPU, &gen);
  CHECK_THROWS_WITH(conv2d(x, w, Tensor(), 1, 1), Catch::Contains("oneDNN does not take the conv2d forward"));
}
