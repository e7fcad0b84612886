// What the tape keeps alive for backward, op by op and for the mlp, against
// what PyTorch saves for the same ops (torch/csrc/autograd/generated, 1.13):
// activation memory is what mixed precision exists to save, and bookkeeping
// that keeps extra inputs and outputs alive spends it back.
#include <catch2/catch.hpp>
#include <functional>

#include "mixtape.h"
#include "models/mlp.h"
#include "test_util.h"

using namespace mt;
using mt::test::saved_bytes;

namespace {

struct Row {
  const char* op;
  std::vector<Shape> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  int64_t pytorch;  // bytes PyTorch keeps alive beyond the output
  int64_t mixtape;  // bytes mixtape keeps (never more than PyTorch)
};

}  // namespace

// Catches: binary ops saving a, b and out regardless of need; unary ops
// saving input and output; linear as matmul + add keeping the pre-bias
// product alive (~3 MiB instead of ~1 MiB for linear + ReLU at 512x512).
TEST_CASE("ops save only what their backward reads, never more than PyTorch", "[autograd][saved]") {
  constexpr int64_t n = 256 * 256, f32 = 4;
  const Shape v{256, 256};
  const int64_t m = 512, k = 512, out_features = 512;
  const std::vector<Row> table = {
      // op, inputs, PyTorch saves, mixtape saves
      {"add", {v, v}, [](auto& x) { return add(x[0], x[1]); }, 0, 0},
      {"sub", {v, v}, [](auto& x) { return sub(x[0], x[1]); }, 0, 0},
      {"mul", {v, v}, [](auto& x) { return mul(x[0], x[1]); }, 2 * n * f32, 2 * n * f32},  // self, other
      // PyTorch: self and other; mixtape: other and the result (held by the caller anyway).
      {"div", {v, v}, [](auto& x) { return div(x[0], x[1]); }, 2 * n * f32, n * f32},
      {"relu", {v}, [](auto& x) { return relu(x[0]); }, 0, 0},              // result
      {"sigmoid", {v}, [](auto& x) { return sigmoid(x[0]); }, 0, 0},        // result
      {"tanh", {v}, [](auto& x) { return tanh(x[0]); }, 0, 0},              // result
      {"exp", {v}, [](auto& x) { return exp(x[0]); }, 0, 0},                // result
      {"gelu", {v}, [](auto& x) { return gelu(x[0]); }, n * f32, n * f32},  // self
      {"silu", {v}, [](auto& x) { return silu(x[0]); }, n * f32, n * f32},  // self
      // addmm saves the input and the weight (here an intermediate too), not the bias.
      {"linear",
       {{m, k}, {out_features, k}, {out_features}},
       [](auto& x) { return linear(x[0], x[1], x[2]); },
       (m + out_features) * k * f32,
       (m + out_features) * k * f32},
      // + ReLU: the input, the weight and the ReLU's result (the output).
      {"linear+relu",
       {{m, k}, {out_features, k}, {out_features}},
       [](auto& x) { return linear(x[0], x[1], x[2], LinearActivation::Relu); },
       (m + out_features) * k * f32,
       (m + out_features) * k * f32},
      // + GELU: the input, the weight and GELU's input (the pre-activation).
      {"linear+gelu",
       {{m, k}, {out_features, k}, {out_features}},
       [](auto& x) { return linear(x[0], x[1], x[2], LinearActivation::Gelu); },
       (m + out_features) * k * f32 + m * out_features * f32,
       (m + out_features) * k * f32 + m * out_features * f32},
  };
  for (Device device : {kCPU, kSIM}) {
    for (const Row& row : table) {
      if (device.is_sim() && row.shapes.size() == 3) continue;  // large GEMMs are slow on the simulator
      INFO(row.op << " on " << device.str());
      const int64_t saved = saved_bytes(device, row.shapes, row.fn);
      CHECK(saved == row.mixtape);
      CHECK(saved <= row.pytorch);
    }
  }
}

// Catches: a layer of the mlp keeping more than PyTorch does, e.g. a ReLU
// that saves its input (the pre-activation) besides its output (tried: 2x).
TEST_CASE("the mlp keeps only its hidden activations for backward, as PyTorch does", "[autograd][saved]") {
  manual_seed(1);
  models::Mlp model(784, 10);
  const int64_t batch = 64;
  const Tensor x = full({batch, 1, 28, 28}, 0.5);
  auto run = [&] {
    const int64_t before = memory_stats(kCPU).current_bytes;
    const Tensor logits = model.forward(x);
    return memory_stats(kCPU).current_bytes - before;
  };
  const int64_t with_graph = run();
  int64_t without = 0;
  {
    NoGradGuard no_grad;
    without = run();
  }
  // PyTorch: fc1 saves the input (held by the caller), relu1 its result h1
  // (which fc2 saves too), relu2 its result h2 (which fc3 saves).
  CHECK(with_graph - without == 4 * batch * (256 + 128));
}
