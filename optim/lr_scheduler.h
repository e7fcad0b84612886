// Learning-rate schedules, computed on the host from the step count (no
// device reads). Each scheduler sets every param group's lr to
// base_lr * factor(step); call step() once per optimizer step that ran (with
// a GradScaler, skip it when StepOutcome::skipped(), as PyTorch users must).
#pragma once

#include <cstdint>
#include <vector>

#include "optim/optimizer.h"

namespace mt::optim {

class LrScheduler {
 public:
  explicit LrScheduler(Optimizer& optimizer);
  virtual ~LrScheduler() = default;
  void step();                      // advance one step and apply the new lr
  int64_t last_step() const { return step_; }
  void set_step(int64_t step);      // for resuming from a checkpoint
  double current_lr(size_t group = 0) const;
  virtual double factor(int64_t step) const = 0;  // multiplier of the base lr at `step`

 private:
  void apply();
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

class ConstantLr final : public LrScheduler {
 public:
  explicit ConstantLr(Optimizer& optimizer, int64_t warmup_steps = 0);
  double factor(int64_t step) const override;

 private:
  int64_t warmup_;
};

// Linear warmup from 0 over `warmup_steps`, then cosine decay to min_factor at total_steps.
class WarmupCosineLr final : public LrScheduler {
 public:
  WarmupCosineLr(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
  double factor(int64_t step) const override;

 private:
  int64_t warmup_, total_;
  double min_factor_;
};

// Multiplies the lr by gamma every step_size steps (after an optional warmup).
class StepLr final : public LrScheduler {
 public:
  StepLr(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t warmup_steps = 0);
  double factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
  int64_t warmup_;
};

}  // namespace mt::optim
