// Training with BF16 and 8-bit optimizer state (`mixtape train
// --optimizer-state`) against the same run with f32 state: the targets the
// field reports for them (Dettmers et al.: parity with 32-bit state; llm.c
// and DeepSeek-V3: BF16 moments without observable degradation), stated as
// validation loss within 0.5% relative on gpt-tiny (Brown) and test
// accuracy within 0.3 points on mlp (Fashion-MNIST).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>

#include "tools/train/trainer.h"

using namespace mt;

namespace {

tools::TrainSummary train_with_state(tools::TrainConfig c, optim::StateDtype state) {
  c.optim.state = state;
  c.report.progress = false;
  std::FILE* sink = std::fopen("/dev/null", "w");
  const tools::TrainSummary s = tools::train(c, sink);
  std::fclose(sink);
  return s;
}

}  // namespace

// Catches: low-precision state that trains visibly worse: moments rounded to
// nearest in BF16 (they stop moving), 8-bit state without blocks (one absmax
// per tensor) or with the signed code for exp_avg_sq, embeddings in 8 bits.
// Seen on the 2-core EPYC: gpt-tiny 120 steps, validation loss 2.5938 (f32
// state), 2.5932 (bf16), 2.5956 (int8: +0.07%); mlp accuracy 0.8762,
// 0.8768, 0.8766. Tried: 8-bit exp_avg_sq dequantized through the signed
// code fails it.
TEST_CASE("BF16 and 8-bit optimizer state train as well as f32 state", "[optim][state][e2e]") {
  tools::TrainConfig lm;
  lm.model = "gpt-tiny";
  lm.data.dataset = "brown";
  lm.max_steps = 120;
  lm.data.test_limit = 256;
  tools::TrainConfig mlp;
  mlp.model = "mlp";
  mlp.precision.mode = tools::Precision::Fp32;
  const double f32_loss = train_with_state(lm, optim::StateDtype::F32).validation_loss;
  const double f32_accuracy = train_with_state(mlp, optim::StateDtype::F32).test_accuracy;
  for (const auto state : {optim::StateDtype::BF16, optim::StateDtype::Int8}) {
    INFO(optim::state_dtype_name(state) << " state");
    const double loss = train_with_state(lm, state).validation_loss;
    INFO("gpt-tiny validation loss " << loss << " vs " << f32_loss << " with f32 state");
    CHECK(std::abs(loss - f32_loss) <= 0.005 * f32_loss);
    const double accuracy = train_with_state(mlp, state).test_accuracy;
    INFO("mlp accuracy " << accuracy << " vs " << f32_accuracy << " with f32 state");
    CHECK(std::abs(accuracy - f32_accuracy) <= 0.003);
  }
}
