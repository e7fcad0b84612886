// The small training run the checkpoint fuzz target resumes into, and the
// seed writer saves from: a Linear(3, 2) under AdamW with the GradScaler and
// a warm-up cosine schedule, as train() builds them for a real model, and
// delayed FP8 scaling's state, which a hostile file's "fp8." entries reach.
#pragma once

#include <memory>

#include "amp/fp8_recipe.h"
#include "amp/grad_scaler.h"
#include "nn/layers.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tools/train/trainer.h"

namespace mt::fuzz {

struct TinyRun {
  static constexpr int64_t kBatchesPerEpoch = 4, kSamplesPerEpoch = 4 * kBatchesPerEpoch;
  tools::TrainConfig config;
  nn::Linear model{3, 2};
  optim::AdamW optimizer{model.parameters()};
  amp::GradScaler scaler;
  optim::WarmupCosineLr schedule{optimizer, 1, 3 * kBatchesPerEpoch};
  amp::Fp8State fp8{amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0})};

  TinyRun() {
    config.model = "fuzz-linear";
    config.precision.mode = tools::Precision::Fp16;
    config.epochs = 3;
  }
  tools::CheckpointPosition resume(const std::string& path) {
    return tools::load_checkpoint(
        path, config, kSamplesPerEpoch, model, [&](const optim::StateDict& state) { optimizer.load_state_dict(state); },
        scaler, schedule, &fp8);
  }
};

}  // namespace mt::fuzz
