// Autocast: the policy table, record-time casting, the weight-cast cache.
#include <catch2/catch.hpp>
#include <functional>
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

// Catches: a weight-cast cache that never hands a cast back (every use
// casts again: one cast node and one f16 copy of the weight per use, yet the
// cache still fills), and one that outlives its region (the next region
// would use the cast of a weight the optimizer has since changed).
TEST_CASE("the weight cast is shared within a region and made anew in the next", "[autocast][cache]") {
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO("device " << device.str());
    const Tensor w = param({4, 4}, 7).detach().to(device).requires_grad_();
    const Tensor x = param({2, 4}, 8).detach().to(device);
    Tensor first;
    {
      Autocast guard(device, kF16);
      first = linear(x, w);
      const Tensor second = linear(x, w);
      // linear's inputs are (x, w, bias): edge 1 leads to the cast of w.
      const autograd::Node* cast_first = first.grad_fn()->next_edges()[1].node.get();
      const autograd::Node* cast_second = second.grad_fn()->next_edges()[1].node.get();
      REQUIRE(cast_first != nullptr);
      CHECK(cast_first->name() == "to");
      CHECK(cast_first == cast_second);
    }
    {
      NoGradGuard no_grad;
      copy_(w, mul(w, 2.0));  // what an optimizer step does between regions
    }
    Autocast guard(device, kF16);
    const Tensor after = linear(x, w);
    CHECK(after.grad_fn()->next_edges()[1].node.get() != first.grad_fn()->next_edges()[1].node.get());
    const std::vector<double> before_values = first.detach().to(kF32).to(kCPU).to_vector();
    const std::vector<double> after_values = after.detach().to(kF32).to(kCPU).to_vector();
    for (size_t i = 0; i < before_values.size(); ++i)
      CHECK(after_values[i] == Approx(2 * before_values[i]).margin(1e-2));
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

namespace {

// One call of an op, made by a probe from inputs of the dtypes it asks for.
using MakeInput = std::function<Tensor(const Shape&, DType)>;
struct Probe {
  amp::Op op;
  int inputs;  // floating inputs the policy sees (1: unary; 2+: the mixed-dtype probe applies)
  std::function<Tensor(const MakeInput&, DType first, DType rest)> run;
};

std::vector<Probe> policy_probes() {
  const auto index = [](std::vector<int64_t> v, const Shape& shape, Device d) {
    return from_vector(v, shape, kI64, d);
  };
  using M = const MakeInput&;
  return {
      {amp::Op::MatMul, 2,
       [](M in, DType a, DType b) {
         return matmul(in({4, 8}, a), in({8, 3}, b));
       }},
      {amp::Op::Bmm, 2,
       [](M in, DType a, DType b) {
         return bmm(in({1, 4, 8}, a), in({1, 8, 3}, b));
       }},
      {amp::Op::Linear, 3,
       [](M in, DType a, DType b) {
         return linear(in({4, 8}, a), in({3, 8}, b), in({3}, b));
       }},
      {amp::Op::Conv2d, 3,
       [](M in, DType a, DType b) {
         return conv2d(in({1, 2, 5, 5}, a), in({3, 2, 3, 3}, b), in({3}, b));
       }},
      {amp::Op::ScaledDotProductAttention, 3,
       [](M in, DType a, DType b) {
         return scaled_dot_product_attention(in({1, 2, 3, 4}, a), in({1, 2, 5, 4}, b), in({1, 2, 5, 4}, b));
       }},
      {amp::Op::LinearCrossEntropy, 2,
       [index](M in, DType a, DType b) {
         const Tensor hidden = in({4, 8}, a);
         return linear_cross_entropy(hidden, in({3, 8}, b), index({0, 2, 1, 0}, {4}, hidden.device()));
       }},
      {amp::Op::Exp, 1,
       [](M in, DType a, DType) {
         return exp(in({4, 4}, a));
       }},
      {amp::Op::Log, 1,
       [](M in, DType a, DType) {
         return log(in({4, 4}, a));
       }},
      {amp::Op::Pow, 2,
       [](M in, DType a, DType b) {
         return pow(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Reciprocal, 1,
       [](M in, DType a, DType) {
         return reciprocal(in({4, 4}, a));
       }},
      {amp::Op::Rsqrt, 1,
       [](M in, DType a, DType) {
         return rsqrt(in({4, 4}, a));
       }},
      {amp::Op::Softmax, 1,
       [](M in, DType a, DType) {
         return softmax(in({4, 4}, a), 1);
       }},
      {amp::Op::LogSoftmax, 1,
       [](M in, DType a, DType) {
         return log_softmax(in({4, 4}, a), 1);
       }},
      {amp::Op::LayerNorm, 3,
       [](M in, DType a, DType b) {
         return layer_norm(in({4, 8}, a), {8}, in({8}, b), in({8}, b));
       }},
      {amp::Op::CrossEntropy, 1,
       [index](M in, DType a, DType) {
         const Tensor logits = in({4, 3}, a);
         return cross_entropy(logits, index({0, 2, 1, 0}, {4}, logits.device()));
       }},
      {amp::Op::MseLoss, 2,
       [](M in, DType a, DType b) {
         return mse_loss(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::RmsNorm, 2,
       [](M in, DType a, DType b) {
         return rms_norm(in({4, 4}, a), {4}, in({4}, b));
       }},
      {amp::Op::Sum, 1,
       [](M in, DType a, DType) {
         return sum(in({4, 4}, a));
       }},
      {amp::Op::Mean, 1,
       [](M in, DType a, DType) {
         return mean(in({4, 4}, a));
       }},
      {amp::Op::Var, 1,
       [](M in, DType a, DType) {
         return var(in({4, 4}, a));
       }},
      {amp::Op::Cumsum, 1,
       [](M in, DType a, DType) {
         return cumsum(in({4, 4}, a), 1);
       }},
      {amp::Op::RouterLogits, 2,
       [](M in, DType a, DType b) {
         return router_logits(in({4, 4}, a), in({2, 4}, b));
       }},
      {amp::Op::Add, 2,
       [](M in, DType a, DType b) {
         return add(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Sub, 2,
       [](M in, DType a, DType b) {
         return sub(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Rsub, 1,
       [](M in, DType a, DType) {
         return rsub(in({4, 4}, a), 1.0);
       }},
      {amp::Op::Mul, 2,
       [](M in, DType a, DType b) {
         return mul(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Div, 2,
       [](M in, DType a, DType b) {
         return div(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Where, 2,
       [](M in, DType a, DType b) {
         const Tensor x = in({4, 4}, a);
         return where(gt(x.detach(), 0.0), x, in({4, 4}, b));
       }},
      {amp::Op::Cat, 2,
       [](M in, DType a, DType b) {
         return cat({in({2, 4}, a), in({3, 4}, b)}, 0);
       }},
      {amp::Op::Maximum, 2,
       [](M in, DType a, DType b) {
         return maximum(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Minimum, 2,
       [](M in, DType a, DType b) {
         return minimum(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Swiglu, 2,
       [](M in, DType a, DType b) {
         return swiglu(in({4, 4}, a), in({4, 4}, b));
       }},
      {amp::Op::Rope, 1,
       [](M in, DType a, DType) {
         const Tensor x = in({2, 4, 4}, a);
         return rope(x, full({4, 4}, 0.5, kF32, x.device()), full({4, 4}, 0.25, kF32, x.device()));
       }},
      {amp::Op::IndexAdd, 2,
       [index](M in, DType a, DType b) {
         const Tensor x = in({4, 4}, a);
         return index_add(x, 0, index({1, 1}, {2}, x.device()), in({2, 4}, b));
       }},
      {amp::Op::BatchNorm, 3,
       [](M in, DType a, DType b) {
         const Tensor x = in({2, 3, 4, 4}, a);
         return batch_norm(x, zeros({3}, kF32, x.device()), ones({3}, kF32, x.device()), in({3}, b), in({3}, b),
                           /*training=*/true, 0.1, 1e-5);
       }},
      {amp::Op::SyncBatchNorm, 3,
       [](M in, DType a, DType b) {
         const Tensor x = in({2, 3, 4, 4}, a);
         return sync_batch_norm(x, zeros({3}, kF32, x.device()), ones({3}, kF32, x.device()), in({3}, b), in({3}, b),
                                0.1, 1e-5, [](const Tensor&) {});
       }},
      {amp::Op::Neg, 1,
       [](M in, DType a, DType) {
         return neg(in({4, 4}, a));
       }},
      {amp::Op::Sqrt, 1,
       [](M in, DType a, DType) {
         return sqrt(in({4, 4}, a));
       }},
      {amp::Op::Abs, 1,
       [](M in, DType a, DType) {
         return abs(in({4, 4}, a));
       }},
      {amp::Op::Sign, 1,
       [](M in, DType a, DType) {
         return sign(in({4, 4}, a));
       }},
      {amp::Op::Square, 1,
       [](M in, DType a, DType) {
         return square(in({4, 4}, a));
       }},
      {amp::Op::Relu, 1,
       [](M in, DType a, DType) {
         return relu(in({4, 4}, a));
       }},
      {amp::Op::Silu, 1,
       [](M in, DType a, DType) {
         return silu(in({4, 4}, a));
       }},
      {amp::Op::Tanh, 1,
       [](M in, DType a, DType) {
         return tanh(in({4, 4}, a));
       }},
      {amp::Op::Sin, 1,
       [](M in, DType a, DType) {
         return sin(in({4, 4}, a));
       }},
      {amp::Op::Cos, 1,
       [](M in, DType a, DType) {
         return cos(in({4, 4}, a));
       }},
      {amp::Op::Sigmoid, 1,
       [](M in, DType a, DType) {
         return sigmoid(in({4, 4}, a));
       }},
      {amp::Op::Gelu, 1,
       [](M in, DType a, DType) {
         return gelu(in({4, 4}, a));
       }},
      {amp::Op::Clamp, 1,
       [](M in, DType a, DType) {
         return clamp(in({4, 4}, a), -0.5, 0.5);
       }},
      {amp::Op::Max, 1,
       [](M in, DType a, DType) {
         return max(in({4, 4}, a), 1).values;
       }},
      {amp::Op::Min, 1,
       [](M in, DType a, DType) {
         return min(in({4, 4}, a), 1).values;
       }},
      {amp::Op::MaxPool2d, 1,
       [](M in, DType a, DType) {
         return max_pool2d(in({1, 1, 4, 4}, a), 2, 2);
       }},
      {amp::Op::AvgPool2d, 1,
       [](M in, DType a, DType) {
         return avg_pool2d(in({1, 1, 4, 4}, a), 2, 2);
       }},
      {amp::Op::AdaptiveAvgPool2d, 1,
       [](M in, DType a, DType) {
         return adaptive_avg_pool2d(in({1, 1, 4, 4}, a), {1, 1});
       }},
      {amp::Op::Dropout, 1,
       [](M in, DType a, DType) {
         return dropout(in({4, 4}, a), 0.5, /*training=*/true);
       }},
      {amp::Op::IndexSelect, 1,
       [index](M in, DType a, DType) {
         const Tensor x = in({4, 4}, a);
         return index_select(x, 0, index({3, 0}, {2}, x.device()));
       }},
      {amp::Op::Gather, 1,
       [index](M in, DType a, DType) {
         const Tensor x = in({2, 3}, a);
         return gather(x, 1, index({0, 2, 1, 1}, {2, 2}, x.device()));
       }},
      {amp::Op::Fp8Linear, 3,
       [](M in, DType a, DType b) {
         static amp::Fp8State fp8(amp::Fp8Recipe::current());
         const Tensor w = in({3, 8}, b);
         return fp8::linear(in({4, 8}, a), w, in({3}, b), *fp8.scaling_for(w));
       }},
  };
}

// The policy each op must have, written down independently of the table
// (PyTorch's autocast lists; every op they do not list runs in its input's dtype).
amp::CastPolicy expected_policy(amp::Op op) {
  using amp::Op;
  static const std::set<Op> lower{
      Op::MatMul, Op::Bmm, Op::Linear, Op::Conv2d, Op::ScaledDotProductAttention, Op::LinearCrossEntropy};
  static const std::set<Op> fp32{Op::Exp,     Op::Log,        Op::Pow,       Op::Reciprocal,   Op::Rsqrt,
                                 Op::Softmax, Op::LogSoftmax, Op::LayerNorm, Op::CrossEntropy, Op::MseLoss,
                                 Op::Sum,     Op::Mean,       Op::Var,       Op::Cumsum,       Op::RmsNorm,
                                 Op::RouterLogits};
  static const std::set<Op> promote{Op::Add,   Op::Sub, Op::Rsub,    Op::Mul,    Op::Div,
                                    Op::Where, Op::Cat, Op::Maximum, Op::Minimum, Op::IndexAdd, Op::Swiglu};
  if (lower.contains(op)) return amp::CastPolicy::LowerPrecision;
  if (fp32.contains(op)) return amp::CastPolicy::Fp32;
  if (promote.contains(op)) return amp::CastPolicy::Promote;
  return amp::CastPolicy::InputDType;
}

// The dtypes the op's own tape node ran its floating inputs in.
std::vector<DType> ran_in(const Tensor& out, amp::Op op) {
  REQUIRE(out.grad_fn() != nullptr);
  // Composite ops cast for the op that records: mse_loss is sub/square/mean, router_logits is linear,
  // matmul is a bmm between views, attention's reference path (the CPU) ends
  // in matmul(weights, v) while its fused kernels (sim, CUDA) record one node.
  const std::string own_name(amp::op_name(op));
  const auto records = [&](const std::string& node_name) {
    if (op == amp::Op::MseLoss) return node_name == "sub";
    if (op == amp::Op::MatMul) return node_name == "bmm";
    if (op == amp::Op::RouterLogits) return node_name == "linear";  // on its f32 inputs, autocast off inside
    if (op == amp::Op::ScaledDotProductAttention) return node_name == "bmm" || node_name == own_name;
    return node_name == own_name;
  };
  const autograd::Node* node = out.grad_fn().get();
  while (node != nullptr && !records(node->name()) && !node->next_edges().empty()) {
    node = node->next_edges().front().node.get();
  }
  REQUIRE(node != nullptr);
  CHECK(records(node->name()));
  std::vector<DType> dtypes;
  for (const auto& meta : node->inputs()) {
    if (is_floating(meta.dtype) && !meta.shape.empty()) dtypes.push_back(meta.dtype);
  }
  return dtypes;
}

}  // namespace

// Catches: an op that skips its policy row (it then runs in whatever dtype
// its inputs have, and a Promote op leaves the mixing to the kernel's type
// promotion: its node shows the inputs' own dtypes), a row rewritten to
// another policy (add/mul/where as lower precision or f32, an f32 op left in
// f16), and a row with no op behind it (the table and the probes must match).
TEST_CASE("every policy row is reached and decides the dtype its op runs in", "[autocast][policy]") {
  const std::vector<Probe> probes = policy_probes();
  std::set<amp::Op> probed;
  for (const Probe& p : probes) probed.insert(p.op);
  std::set<amp::Op> rows;
  for (const auto& row : amp::autocast_policy_table()) rows.insert(row.op);
  CHECK(probed == rows);

  for (auto [device, low] : {std::pair{kCPU, kBF16}, std::pair{test::kCudaPath, kF16}}) {
    uint64_t seed = 10;
    const MakeInput make = [&, device = device](const Shape& shape, DType dtype) {
      Generator gen(seed++);
      return add(abs(randn(shape, kF32, kCPU, &gen)), 0.25).to(dtype).to(device).requires_grad_();
    };
    Autocast guard(device, low);
    for (const Probe& p : probes) {
      const std::string name(amp::op_name(p.op));
      INFO(device.str() << " " << name);
      switch (expected_policy(p.op)) {
        case amp::CastPolicy::LowerPrecision:
          for (DType t : ran_in(p.run(make, kF32, kF32), p.op)) CHECK(t == low);
          break;
        case amp::CastPolicy::Fp32:
          for (DType t : ran_in(p.run(make, low, low), p.op)) CHECK(t == kF32);
          break;
        case amp::CastPolicy::Promote:
          for (DType t : ran_in(p.run(make, low, low), p.op)) CHECK(t == low);
          if (p.inputs > 1) {
            for (DType t : ran_in(p.run(make, low, kF32), p.op)) CHECK(t == kF32);
          }
          break;
        case amp::CastPolicy::InputDType: {
          for (DType t : ran_in(p.run(make, kF32, kF32), p.op)) CHECK(t == kF32);
          const std::vector<DType> mixed = ran_in(p.run(make, low, kF32), p.op);
          CHECK(mixed.front() == low);  // batch_norm: f16 activations with f32 parameters
          for (size_t i = 1; i < mixed.size(); ++i) CHECK(mixed[i] == kF32);
          break;
        }
      }
    }
  }
}
