// Custom autograd functions (autograd/function.h) and gradcheck over tensors
// reached in place (a module's own parameters).
#include <memory>

#include "mixtape.h"
#include "test_util.h"

using namespace mt;
using namespace mt::test;
using Catch::Matchers::Contains;

namespace {

// y = tanh(k x); dy/dx = k (1 - y^2). Records the dtype forward saw.
template <amp::CastPolicy Policy>
struct ScaledTanh : autograd::Function<ScaledTanh<Policy>> {
  static constexpr const char* name = "scaled_tanh";
  static constexpr amp::CastPolicy autocast = Policy;
  static inline DType seen = kF64;
  static Tensor forward(autograd::FunctionContext& ctx, const std::vector<Tensor>& in, double k) {
    seen = in[0].dtype();
    Tensor y = tanh(in[0] * k);
    ctx.save_for_backward({y});
    ctx.values["k"] = k;
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx, const Tensor& g) {
    const Tensor y = ctx.saved()[0];
    return {g * (1.0 - y * y) * ctx.values["k"]};
  }
};
using Tanh32 = ScaledTanh<amp::CastPolicy::Fp32>;

// x * w with a backward that forgets w's gradient slot.
struct MissingGrad : autograd::Function<MissingGrad> {
  static Tensor forward(autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[1]});
    return in[0] * in[1];
  }
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx, const Tensor& g) { return {g * ctx.saved()[0]}; }
};

// y = x^2 with a backward missing the factor 2.
struct BadSquare : autograd::Function<BadSquare> {
  static Tensor forward(autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    return in[0] * in[0];
  }
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx, const Tensor& g) { return {g * ctx.saved()[0]}; }
};

}  // namespace

// Catches: a custom backward not wired to the node (gradient missing or
// wrong), forward's own ops recorded on the tape, extra arguments lost.
TEST_CASE("a custom function records one node with its own backward", "[autograd][function]") {
  const Tensor x = randn64({3, 4}, 41);
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return Tanh32::apply({in[0]}, 1.7); },
                                      {x.detach().requires_grad_()});
  INFO(r.message);
  CHECK(r.ok);
  const Tensor leaf = x.detach().requires_grad_();
  const Tensor y = Tanh32::apply({leaf}, 2.0);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "scaled_tanh");
  CHECK(y.to_vector() == tanh(x * 2.0).to_vector());
}

// Catches: the declared autocast policy ignored (forward seeing bf16 under
// an Fp32 rule, or f32 under LowerPrecision), and gradients not returned in
// the input's own dtype through the cast.
TEST_CASE("a custom function declares its autocast policy like a built-in op", "[autograd][function][autocast]") {
  const Tensor x = randn({4, 4}).to(kBF16).requires_grad_();
  {
    const amp::Autocast autocast(kCPU, kBF16);
    const Tensor y = Tanh32::apply({x}, 1.0);
    CHECK(Tanh32::seen == kF32);
    CHECK(y.dtype() == kF32);
    sum(y).backward();
    CHECK(x.grad().dtype() == kBF16);
    const Tensor f32_input = randn({4, 4});
    ScaledTanh<amp::CastPolicy::LowerPrecision>::apply({f32_input}, 1.0);
    CHECK(ScaledTanh<amp::CastPolicy::LowerPrecision>::seen == kBF16);
    ScaledTanh<amp::CastPolicy::InputDType>::apply({f32_input}, 1.0);
    CHECK(ScaledTanh<amp::CastPolicy::InputDType>::seen == kF32);
  }
  // Outside autocast nothing is cast.
  Tanh32::apply({x}, 1.0);
  CHECK(Tanh32::seen == kBF16);
}

// Catches: a saved tensor changed in place used silently, the saved output
// keeping itself alive through its own node (a reference cycle that leaks
// every activation), and a wrong number of gradients accepted.
TEST_CASE("custom function saved tensors: version check, no cycle, gradient count", "[autograd][function]") {
  const Tensor x = randn({5}).requires_grad_();
  std::weak_ptr<TensorImpl> output_impl;
  {
    // Dropped without a backward (which would free the node's closure anyway): an eval step.
    const Tensor y = Tanh32::apply({x * 1.0}, 1.0);
    output_impl = y.impl_ptr();
  }
  CHECK(output_impl.expired());
  const Tensor w = randn({5}).requires_grad_();
  const Tensor h = w * 1.0;
  const Tensor z = MissingGrad::apply({x, h});
  CHECK_THROWS_WITH(sum(z).backward(), Contains("backward returned 1 gradients for 2 inputs"));
  const Tensor y = Tanh32::apply({x}, 1.0);
  {
    const NoGradGuard no_grad;
    fill_(y, 0.0);  // modifies the saved output in place
  }
  CHECK_THROWS(sum(y).backward());
}

// Catches: gradcheck checking copies of the parameters, so a module's own
// weights (reached through the module, not fn's argument) were never
// perturbed ("input 0 received no gradient"), and gradcheck leaving its
// gradients behind on them.
TEST_CASE("gradcheck checks a module's own parameters in place", "[autograd][gradcheck]") {
  nn::Linear layer(3, 2);
  layer.to(kF64);
  const Tensor x = randn64({4, 3}, 42);
  const Tensor before = layer.weight.clone();
  const GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>&) { return tanh(layer.forward(x)); }, layer.parameters());
  INFO(r.message);
  CHECK(r.ok);
  CHECK(layer.weight.to_vector() == before.to_vector());  // restored after perturbing
  CHECK_FALSE(layer.weight.grad().defined());
  // A wrong backward through the same route is caught.
  const GradcheckResult wrong =
      gradcheck([&](const std::vector<Tensor>&) { return BadSquare::apply({layer.weight}); }, {layer.weight});
  CHECK_FALSE(wrong.ok);
}
