// The CPU elementwise kernels' bf16 block path (kernels/elementwise/cpu.cpp:
// contiguous bf16 read and written a block at a time through f32 buffers)
// must give exactly what the general path gives (the whole tensor gathered
// to f32, the formula, one rounding on store). Sizes cross block and thread boundaries; an op
// in place and a scalar operand take the path, a shifted overlap does not.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "kernels/elementwise/elementwise.h"

using namespace mt;

namespace {

std::vector<uint16_t> bits(const Tensor& t) {
  REQUIRE(t.dtype() == kBF16);
  const Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.data_ptr());
  return {p, p + c.numel()};
}

// f on contiguous bf16 (the block path) against f on the same values seen
// through a strided view (the general path: gather to f32, the formula,
// scatter with one rounding): forward and backward must agree bit for bit.
void check_same_as_general_path(const char* name, const std::function<Tensor(const Tensor&)>& f) {
  for (const int64_t n : {int64_t{3}, int64_t{511}, int64_t{1537}, int64_t{70001}}) {
    INFO(name << ", " << n << " elements");
    Generator gen(31);
    const Tensor x = mul(randn({n}, kF32, kCPU, &gen), 3.0).to(kBF16);
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

TEST_CASE("bf16 elementwise ops on the CPU: the block path equals the general path bit for bit (block path bugs)",
          "[kernels][cpu][bf16]") {
  check_same_as_general_path("relu", [](const Tensor& x) { return relu(x); });
  check_same_as_general_path("gelu", [](const Tensor& x) { return gelu(x); });
  check_same_as_general_path("tanh", [](const Tensor& x) { return tanh(x); });
  check_same_as_general_path("x * 0.37 (a scalar operand)", [](const Tensor& x) { return mul(x, 0.37); });
  check_same_as_general_path("x * x + x", [](const Tensor& x) { return add(mul(x, x), x); });
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
