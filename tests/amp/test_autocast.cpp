// Autocast: the policy table, record-time casting, the weight-cast cache.
#include <catch2/catch.hpp>
#include <set>

#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using amp::Autocast;

namespace {
Tensor param(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kF32, kCPU, &gen).requires_grad_();
}
}  // namespace

TEST_CASE("every op runs in the dtype its policy says, under f16 and bf16", "[autocast]") {
  // On the CPU and on the sim device (whose ops run the CUDA kernels).
  for (Device device : {kCPU, test::kCudaPath})
  for (DType low : {kF16, kBF16}) {
    INFO("device " << device.str() << ", autocast dtype " << dtype_name(low));
    const Tensor x = param({4, 8}, 1).detach().to(device).requires_grad_();
    const Tensor w = param({3, 8}, 2).detach().to(device).requires_grad_();
    const Tensor b = param({3}, 3).detach().to(device).requires_grad_();
    Autocast guard(device, low);
    // lower precision
    CHECK(matmul(x, w.t()).dtype() == low);
    CHECK(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype() == low);
    CHECK(linear(x, w, b).dtype() == low);
    // fp32, also when the input is low precision
    const Tensor h = linear(x, w, b);
    CHECK(exp(h).dtype() == kF32);
    CHECK(log(abs(h)).dtype() == kF32);
    CHECK(pow(h, 2.0).dtype() == kF32);
    CHECK(reciprocal(h).dtype() == kF32);
    CHECK(rsqrt(abs(h)).dtype() == kF32);
    CHECK(softmax(h, 1).dtype() == kF32);
    CHECK(log_softmax(h, 1).dtype() == kF32);
    CHECK(layer_norm(h, {3}).dtype() == kF32);
    CHECK(sum(h).dtype() == kF32);
    CHECK(mean(h).dtype() == kF32);
    CHECK(var(h).dtype() == kF32);
    CHECK(mse_loss(h, h.detach()).dtype() == kF32);
    CHECK(cross_entropy(h, from_vector(std::vector<int64_t>{0, 1, 2, 0}, {4}, kI64, device)).dtype() == kF32);
    // promote: widest input wins
    CHECK(add(h, b).dtype() == kF32);
    CHECK(mul(h, h).dtype() == low);
    CHECK(cat({h, b.unsqueeze(0)}, 0).dtype() == kF32);
    // everything else runs in the dtype it is given
    CHECK(relu(h).dtype() == low);
    CHECK(tanh(h).dtype() == low);
    // f64 is never cast
    CHECK(matmul(x.to(kF64), w.t().to(kF64)).dtype() == kF64);
  }
}

TEST_CASE("autocast is per device type, nestable, and has a disabled form", "[autocast]") {
  const Tensor x = param({2, 2}, 4);
  CHECK(matmul(x, x).dtype() == kF32);
  {
    Autocast cuda_only(kCUDA, kF16);
    CHECK(matmul(x, x).dtype() == kF32);  // CPU tensors are not affected by CUDA autocast
  }
  Autocast outer(kCPU, kBF16);
  CHECK(amp::is_autocast_enabled(kCPU));
  CHECK(matmul(x, x).dtype() == kBF16);
  {
    Autocast inner(kCPU, kF16);
    CHECK(matmul(x, x).dtype() == kF16);
    {
      Autocast off(kCPU, kF16, /*enabled=*/false);
      CHECK(matmul(x, x).dtype() == kF32);  // a region that must stay f32
    }
  }
  CHECK(matmul(x, x).dtype() == kBF16);
  REQUIRE_THROWS_WITH(Autocast(kCPU, kF32), Catch::Contains("f16 or bf16"));
}

TEST_CASE("each f32 weight is cast once per outermost region, then the cache clears", "[autocast]") {
  const Tensor w = param({4, 4}, 5);
  const Tensor x = param({2, 4}, 6).detach();
  Tensor first, second;
  {
    Autocast guard(kCPU, kF16);
    first = linear(x, w);
    second = linear(x, w);
    CHECK(amp::cache_size() == 1);  // x does not require grad: never cached
    // Both uses share the one cast node of w.
    const auto& edges_a = first.grad_fn()->next_edges();
    CHECK(!edges_a.empty());
    {
      Autocast nested(kCPU, kF16);
      linear(x, w);
      CHECK(amp::cache_size() == 1);
    }
    CHECK(amp::cache_size() == 1);  // an inner region's exit keeps the outer cache
    // Gradients flow through the cached cast into w in f32.
    sum(add(first, second)).backward();
  }
  CHECK(amp::cache_size() == 0);
  CHECK(w.grad().dtype() == kF32);
  {
    Autocast no_cache(kCPU, kF16, true, /*cache_enabled=*/false);
    linear(x, w);
    CHECK(amp::cache_size() == 0);
  }
}

TEST_CASE("the policy table lists each op once", "[autocast]") {
  std::set<std::string_view> names;
  for (const auto& row : amp::autocast_policy_table()) CHECK(names.insert(row.name).second);
  CHECK(amp::autocast_policy(amp::Op::Linear) == amp::CastPolicy::LowerPrecision);
  CHECK(amp::autocast_policy(amp::Op::Softmax) == amp::CastPolicy::Fp32);
  CHECK(amp::autocast_policy(amp::Op::Cat) == amp::CastPolicy::Promote);
  CHECK(amp::autocast_policy(amp::Op::BatchNorm) == amp::CastPolicy::InputDType);
  CHECK(amp::default_autocast_dtype(kCPU) == kBF16);
  CHECK(amp::default_autocast_dtype(kCUDA) == kF16);
}
