// Anomaly mode (autograd/anomaly.h) and the autocast dtype report
// (autograd/dtype_report.h): the debugging aids of `mixtape train
// --detect-anomaly` and `--dtype-report`, with module paths from
// nn::ForwardScope.
#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "autograd/anomaly.h"
#include "autograd/dtype_report.h"
#include "autograd/module_path.h"
#include "autograd/node.h"
#include "mixtape.h"
#include "nn/layers.h"

using namespace mt;
using Catch::Contains;

namespace {

struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  Block() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 4)); }
  Tensor forward(const Tensor& x) override {
    const nn::ForwardScope scope(*this);
    return relu(fc->forward(x));
  }
};

struct TwoBlocks : nn::Module {
  std::shared_ptr<Block> first, second;
  TwoBlocks() {
    first = register_module("first", std::make_shared<Block>());
    second = register_module("second", std::make_shared<Block>());
  }
  Tensor forward(const Tensor& x) override {
    const nn::ForwardScope scope(*this);
    return second->forward(first->forward(x));
  }
};

// Weights of 100 and inputs of 100: the first block's f16 GEMM gives 4e4
// (finite in f16), the second's 1.6e7, past f16's 65504.
void make_overflow_in_f16(TwoBlocks& net) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : net.named_parameters()) fill_(p, name.find("weight") != std::string::npos ? 100.0 : 0.0);
}

}  // namespace

// Bug caught: the forward check missing (or checking only ops' inputs), so an
// f16 overflow surfaced steps later as a NaN loss with no name attached.
TEST_CASE("anomaly mode names the op and module whose f16 output overflowed from finite inputs", "[anomaly]") {
  TwoBlocks net;
  make_overflow_in_f16(net);
  const Tensor x = full({2, 4}, 100.0);
  {
    const amp::Autocast autocast(kCPU, kF16);
    CHECK_NOTHROW(net.forward(x));  // off: nothing is checked
  }
  const AnomalyMode anomaly;
  const amp::Autocast autocast(kCPU, kF16);
  CHECK_THROWS_AS(net.forward(x), AnomalyError);
  CHECK_THROWS_WITH(net.forward(x), Contains("the forward of linear in module second.fc") &&
                                        Contains("produced a non-finite value from finite inputs") &&
                                        Contains("f16 [2, 4]") && Contains("finite range [4e+04, 4e+04]"));
}

TEST_CASE("anomaly mode tells an op that passed on a non-finite input from one that produced it", "[anomaly]") {
  TwoBlocks net;
  const AnomalyMode anomaly;
  CHECK_THROWS_WITH(net.forward(full({2, 4}, INFINITY)),
                    Contains("the forward of linear in module first.fc passed on non-finite values it was given") &&
                        Contains("input 0: f32 [2, 4]: no finite value, 8 inf"));
}

// Bug caught: the backward check missing, or naming the wrong node.
TEST_CASE("anomaly mode names the backward that made a non-finite gradient and the module of its forward",
          "[anomaly]") {
  Tensor w = zeros({3}).requires_grad_();
  const AnomalyMode anomaly;
  const Tensor loss = sum(sqrt(w));  // sqrt(0) = 0 is finite; its derivative 1 / (2 sqrt(0)) is not
  CHECK_THROWS_WITH(loss.backward(), Contains("the backward of sqrt") && Contains("non-finite gradient for input 0") &&
                                         Contains("3 inf"));
}

// Bug caught: anomaly mode throwing on the GradScaler's ordinary overflow
// (every first f16 step at scale 65536 may), instead of noting it.
TEST_CASE("in a loss-scaled backward an overflow is noted, not thrown, unless asked", "[anomaly]") {
  Tensor w = zeros({3}).requires_grad_();
  amp::GradScaler scaler;
  {
    const AnomalyMode anomaly;
    CHECK_NOTHROW(scaler.scale(sum(sqrt(w))).backward());
    CHECK_THAT(autograd::last_backward_overflow(), Contains("the backward of sqrt") && Contains("overflowed"));
  }
  w.impl()->grad.reset();
  const AnomalyMode strict(true, /*stop_in_scaled_backward=*/true);
  CHECK_THROWS_AS(scaler.scale(sum(sqrt(w))).backward(), AnomalyError);
}

TEST_CASE("module paths are kept only while a debugging aid wants them", "[anomaly]") {
  CHECK_FALSE(autograd::module_paths_wanted());
  {
    const AnomalyMode anomaly;
    CHECK(autograd::module_paths_wanted());
    {
      const autograd::DtypeRecorder recorder;
      CHECK(autograd::module_paths_wanted());
    }
    CHECK(autograd::module_paths_wanted());
  }
  CHECK_FALSE(autograd::module_paths_wanted());
  TwoBlocks net;
  const Tensor y = net.forward(ones({1, 4}));
  CHECK(y.grad_fn()->forward_module().empty());  // off: nodes carry no path
}

// Bugs caught: a policy row read wrong (linear reported in f32 under
// autocast), module paths one level off, and the flags: a Promote op pulled
// to f32 by an f32 parameter, an activation-only op fed f32, a custom op
// without a policy.
TEST_CASE("the dtype report lists each op's dtypes per module and flags activations left in f32", "[dtype_report]") {
  TwoBlocks net;
  const Tensor bias = ones({4}).requires_grad_();  // an f32 parameter added to a bf16 activation
  autograd::DtypeRecorder recorder;
  {
    const amp::Autocast autocast(kCPU, kBF16);
    const Tensor h = net.forward(ones({2, 4}));
    const Tensor promoted = add(h, bias);     // bf16 + f32 param -> f32
    const Tensor still_f32 = relu(promoted);  // input dtype: stays f32
    // A user's op recording its node directly: no autocast policy.
    const Tensor custom = autograd::record_node("my_square", mul(still_f32.detach(), still_f32.detach()), {still_f32},
                                                [](const Tensor& g) { return std::vector<Tensor>{g}; });
    (void)custom;
  }
  auto find = [&](const std::string& module, const std::string& op) -> const autograd::DtypeReportRow& {
    for (const auto& row : recorder.rows()) {
      if (row.module == module && row.op == op) return row;
    }
    FAIL("no row for " << module << " " << op);
    static autograd::DtypeReportRow none;
    return none;
  };
  const auto& linear = find("first.fc", "linear");
  CHECK(linear.policy == "lower_precision");
  CHECK(linear.compute == "bf16");
  CHECK(linear.output == "bf16");
  CHECK(linear.inputs == "f32 act, f32 param, f32 param");
  CHECK(linear.flag.empty());
  CHECK(find("second.fc", "linear").calls == 1);
  CHECK(find("second", "relu").output == "bf16");
  const auto& add_row = find("(model)", "add");
  CHECK(add_row.output == "f32");
  CHECK_THAT(add_row.flag, Contains("an f32 parameter promoted this op to f32"));
  CHECK_THAT(find("(model)", "relu").flag, Contains("its input arrived in f32"));
  CHECK_THAT(find("(model)", "my_square").flag, Contains("custom op with no autocast policy"));
}

// Bug caught: a node the tape records without a policy row (op_list.h's
// MT_TAPE_OPS: views, moves, casts) taken for a user's custom op, which the
// report lists with no policy and flags when it leaves an activation f32.
TEST_CASE("the dtype report leaves the tape's own views, moves and casts out", "[dtype_report]") {
  const Tensor x = ones({2, 3, 4}).requires_grad_();
  autograd::DtypeRecorder recorder;
  std::vector<std::string> recorded;
  {
    const amp::Autocast autocast(kCPU, kBF16);
    for (const Tensor& t : {x.view({6, 4}), x.permute({2, 1, 0}), x.slice(1, 0, 2), x.unsqueeze(0).expand({2, 2, 3, 4}),
                            x.unsqueeze(0), x.unsqueeze(0).squeeze(0), x.clone(), x.to(kF16)}) {
      REQUIRE(t.grad_fn() != nullptr);
      recorded.push_back(t.grad_fn()->name());
    }
  }
  CHECK(recorded == std::vector<std::string>{"view", "permute", "slice", "expand", "unsqueeze", "squeeze", "clone",
                                             "to"});
  for (const autograd::DtypeReportRow& row : recorder.rows()) {
    INFO(row.op);
    CHECK(row.policy != "none");
  }
}
