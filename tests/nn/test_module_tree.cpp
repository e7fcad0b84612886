// The module tree as a PyTorch user walks it: ModuleList/Sequential
// iteration and typed access, named_modules, apply, as<T>, the printed tree,
// multi-input forwards; and the layers nn::RMSNorm and nn::MultiheadAttention
// (their values against PyTorch: tests/parity, the multihead_attention and
// rms_norm records).
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "mixtape.h"

using namespace mt;
using Catch::Contains;

namespace {

// A block whose forward takes a mask: the multi-input form module.h documents.
struct MaskedBlock : nn::Module {
  std::shared_ptr<nn::Linear> proj;
  MaskedBlock() { proj = register_module("proj", std::make_shared<nn::Linear>(4, 4)); }
  Tensor forward(const Tensor& x, const Tensor& keep) { return proj->forward(x) * keep; }
  std::string name() const override { return "MaskedBlock"; }
};

struct Net : nn::Module {
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::Sequential> head;
  Net() {
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<MaskedBlock>());
    head = register_module("head", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                       std::make_shared<nn::Linear>(4, 2), std::make_shared<nn::ReLU>()}));
  }
  Tensor forward(const Tensor& x, const Tensor& keep) {
    Tensor h = x;
    for (const auto& block : *blocks) h = block->as<MaskedBlock>()->forward(h, keep);
    return head->forward(h);
  }
  std::string name() const override { return "Net"; }
};

}  // namespace

// Catches: iteration that skips or repeats modules, at<T> handing back a
// module of the wrong type (or nullptr) instead of naming the mismatch.
TEST_CASE("ModuleList and Sequential iterate and give typed access", "[nn][module]") {
  Net net;
  int count = 0;
  for (const auto& block : *net.blocks) {
    CHECK(block.get() == (*net.blocks)[static_cast<size_t>(count)].get());
    ++count;
  }
  CHECK(count == 3);
  CHECK(net.blocks->at<MaskedBlock>(1)->proj != nullptr);
  CHECK_THROWS_WITH(net.head->at<nn::Linear>(1), Contains("the module there is a ReLU"));
  CHECK_THROWS_WITH((*net.blocks)[3], Contains("ModuleList[3]: it holds 3 modules"));
  std::vector<std::string> kinds;
  for (const auto& m : *net.head) kinds.push_back(m->name());
  CHECK(kinds == std::vector<std::string>{"Linear", "ReLU"});
  // The multi-input forward runs; the single-input one names the module.
  const Tensor y = net.forward(ones({5, 4}), ones({5, 4}));
  CHECK(y.sizes() == Shape{5, 2});
  CHECK_THROWS_WITH(net(ones({5, 4})), Contains("Net has no single-input forward(x)"));
  CHECK_THROWS_WITH(net.blocks->forward(ones({5, 4})), Contains("iterate over the ModuleList"));
}

// Catches: named_modules missing self or nested modules, wrong dotted
// names, a shared module listed twice; apply skipping children.
TEST_CASE("named_modules, apply and as<T> walk the whole tree", "[nn][module]") {
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, m] : net.named_modules()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"", "blocks", "blocks.0", "blocks.0.proj", "blocks.1", "blocks.1.proj",
                                          "blocks.2", "blocks.2.proj", "head", "head.0", "head.1"});
  CHECK(net.modules().size() == names.size());
  int linears = 0;
  net.apply([&](nn::Module& m) {
    if (auto* linear = m.as<nn::Linear>()) {
      ++linears;
      nn::init::zeros_(linear->bias);
    }
  });
  CHECK(linears == 4);
  for (const auto& [name, p] : net.named_parameters()) {
    if (name.ends_with("bias")) CHECK(sum(abs(p)).item<double>() == 0);
  }
  CHECK(net.as<nn::Linear>() == nullptr);
}

// Catches: a printed tree without the children, their names, the layer
// arguments or the parameter counts.
TEST_CASE("printing a module shows the tree with parameter counts", "[nn][module]") {
  Net net;
  std::ostringstream out;
  out << net;
  const std::string text = out.str();
  CHECK_THAT(text, Contains("Net(\n  (blocks): ModuleList(\n    (0): MaskedBlock(\n"));
  CHECK_THAT(text, Contains("(proj): Linear(in_features=4, out_features=4, bias=true)  # 20 parameters"));
  CHECK_THAT(text, Contains("(head): Sequential(\n    (0): Linear(in_features=4, out_features=2, bias=true)"));
  CHECK_THAT(text, Contains("(1): ReLU()"));
  CHECK_THAT(text, Contains(")  # 70 parameters"));  // the whole net: 3 * 20 + 10
  // A module that does not say its name prints its class's, as PyTorch does.
  struct Unnamed : nn::Module {};
  CHECK(Unnamed().name() == "Unnamed");
  std::ostringstream attention;
  attention << nn::MultiheadAttention(4, 2);
  CHECK_THAT(attention.str(), Contains("MultiheadAttention(\n  embed_dim=4, num_heads=2, dropout=0, batch_first=false\n"
                                       "  (out_proj): Linear("));
}

// Catches: the root mean square taken over the wrong dims, eps outside the
// square root, the weight not applied, the statistic computed in bf16.
TEST_CASE("RMSNorm: values, gradient, dtypes", "[nn][rmsnorm]") {
  nn::RMSNorm norm({4}, 1e-6);
  norm.to(kF64, /*keep_norms_fp32=*/false);
  {
    const NoGradGuard no_grad;
    copy_(norm.weight, from_vector(std::vector<double>{1.5, -0.5, 0.25, 2}, {4}, kF64));
  }
  const Tensor x = randn({2, 3, 4}, kF64);
  const Tensor y = norm.forward(x);
  const std::vector<double> xv = x.to_vector(), yv = y.to_vector(), w = {1.5, -0.5, 0.25, 2};
  for (int r = 0; r < 6; ++r) {
    double ms = 0;
    for (int j = 0; j < 4; ++j) ms += xv[r * 4 + j] * xv[r * 4 + j] / 4;
    for (int j = 0; j < 4; ++j)
      CHECK(yv[r * 4 + j] == Approx(xv[r * 4 + j] / std::sqrt(ms + 1e-6) * w[j]).epsilon(1e-12));
  }
  const GradcheckResult g = gradcheck(
      [&](const std::vector<Tensor>& in) {
        norm.weight = in[1];
        return norm.forward(in[0]);
      },
      {x.detach().requires_grad_(), norm.weight.detach().requires_grad_()});
  INFO(g.message);
  CHECK(g.ok);
  // bf16 activations with f32 weights give f32 (computed in f32); a bf16 model gives bf16.
  nn::RMSNorm f32_norm({8}, 1e-5);  // (the default eps is x's dtype's machine epsilon, as PyTorch's)
  const Tensor xb = randn({3, 8}).to(kBF16);
  CHECK(f32_norm.forward(xb).dtype() == kF32);
  CHECK(f32_norm.forward(xb).to_vector() == f32_norm.forward(xb.to(kF32)).to_vector());
  f32_norm.to(kBF16, /*keep_norms_fp32=*/false);
  CHECK(f32_norm.forward(xb).dtype() == kBF16);
  CHECK_THROWS_WITH(f32_norm.forward(randn({3, 7})), Contains("does not end in the normalized shape [8]"));
}

// Catches: the fused kernel's CUDA path (sim) centering the row as
// LayerNorm does, keeping mean(g) in dx, or reducing the weight's gradient
// over the wrong rows; and a bf16 statistic on either path.
TEST_CASE("rms_norm: one fused kernel, sim equals the CPU forward and backward", "[nn][rmsnorm][sim]") {
  manual_seed(21);
  const Tensor x = add(randn({5, 3, 96}), 3.0);  // a large mean: centering would show
  const Tensor w = randn({96}), up = randn({5, 3, 96});
  auto run = [&](Device device, DType dtype) {
    const Tensor xd = x.to(dtype).to(device).detach().requires_grad_(), wd = w.to(device).detach().requires_grad_();
    const Tensor y = rms_norm(xd, {96}, wd, 1e-5);
    CHECK(y.grad_fn()->name() == std::string("rms_norm"));  // one node, not a composite
    sum(mul(y, up.to(device))).backward();
    return std::vector<std::vector<double>>{y.to(kCPU).to_vector(), xd.grad().to(kCPU).to_vector(),
                                            wd.grad().to(kCPU).to_vector()};
  };
  const auto want = run(kCPU, kF64), cpu = run(kCPU, kF32), sim = run(kSIM, kF32), sim_bf16 = run(kSIM, kBF16);
  const char* what[] = {"y", "dx", "dw"};
  for (size_t k = 0; k < 3; ++k) {
    INFO(what[k]);
    double scale = 0, worst_cpu = 0, worst_sim = 0;
    for (size_t i = 0; i < want[k].size(); ++i) {
      scale = std::max(scale, std::abs(want[k][i]));
      worst_cpu = std::max(worst_cpu, std::abs(cpu[k][i] - want[k][i]));
      worst_sim = std::max(worst_sim, std::abs(sim[k][i] - want[k][i]));
    }
    CHECK(worst_cpu < 1e-5 * scale);
    CHECK(worst_sim < 1e-5 * scale);
  }
  // bf16 input, f32 weight: promoted to f32, so the result is the f32 one on the rounded input.
  const Tensor xb = x.to(kBF16).to(kF32);
  const std::vector<double> y_rounded = rms_norm(xb, {96}, w, 1e-5).to_vector();
  double worst = 0;
  for (size_t i = 0; i < y_rounded.size(); ++i) worst = std::max(worst, std::abs(sim_bf16[0][i] - y_rounded[i]));
  CHECK(worst < 1e-5);
}

// Catches: heads split or merged in the wrong order (batch_first must be a
// transpose of the sequence-first result), is_causal differing from the
// explicit mask PyTorch users pass, PyTorch's bool mask sense inverted, and
// parameter names a PyTorch state_dict would not load into.
TEST_CASE("MultiheadAttention: layouts, masks, names and gradient", "[nn][attention]") {
  nn::MultiheadAttention seq_first(8, 2), batch_first(8, 2, 0.0, true, true);
  batch_first.load_state_dict(seq_first.state_dict());
  std::vector<std::string> names;
  for (const auto& [name, p] : seq_first.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  const Tensor x = randn({5, 3, 8});  // [L, N, E]
  const Tensor y = seq_first.forward(x, x, x);
  REQUIRE(y.sizes() == Shape{5, 3, 8});
  const Tensor yb = batch_first.forward(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1));
  const std::vector<double> a = y.transpose(0, 1).contiguous().to_vector(), b = yb.to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
  // is_causal = PyTorch's bool mask with true above the diagonal (blocked).
  std::vector<double> blocked;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) blocked.push_back(j > i ? 1 : 0);
  const Tensor mask = from_vector(blocked, {5, 5}, kBool);
  const std::vector<double> causal = seq_first.forward(x, x, x, Tensor(), Tensor(), true).to_vector();
  const std::vector<double> masked = seq_first.forward(x, x, x, Tensor(), mask).to_vector();
  for (size_t i = 0; i < causal.size(); ++i) CHECK(causal[i] == Approx(masked[i]).margin(1e-6));
  // The first query sees only the first key: its output does not depend on later keys.
  Tensor x2 = x.clone();
  {
    const NoGradGuard no_grad;
    fill_(x2.narrow(0, 3, 2), 5.0);
  }
  const Tensor first = seq_first.forward(x, x, x, Tensor(), mask).select(0, 0);
  const Tensor first2 = seq_first.forward(x2, x2, x2, Tensor(), mask).select(0, 0);
  CHECK(first.to_vector() == first2.to_vector());
  // The weights get gradients.
  sum(seq_first.forward(x, x, x)).backward();
  CHECK(seq_first.in_proj_weight.grad().defined());
  CHECK(seq_first.out_proj->weight.grad().defined());
  CHECK_THROWS_WITH(nn::MultiheadAttention(10, 3), Contains("multiple of num_heads 3"));
}
