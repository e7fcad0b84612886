// Learning-rate schedules. Each scheduler sets every param group's lr to
// base_lr * factor(step); the formulas are kernels/optim/lr_schedule.h.
//
// Two ways to step:
//   step()                the host counts; call it once per optimizer step
//                         that ran (with a GradScaler, only when the step was
//                         not skipped, which needs the skip flag on the host)
//   step_unless(found_inf) the step count and the factor live on the device
//                         (after use_device_counter): a one-thread kernel
//                         advances the count unless found_inf is set, and the
//                         optimizer reads the factor there. No host read, so
//                         a GradScaler run never waits for the skip flag, and
//                         a CUDA graph can replay the whole step.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace mt::optim {

class LrScheduler {
 public:
  LrScheduler(Optimizer& optimizer, kernels::LrSchedule schedule);
  virtual ~LrScheduler() = default;
  void step();                                // advance one step and apply the new lr
  int64_t last_step() const;                  // with a device counter: reads it (a host sync)
  void set_step(int64_t step);                // for resuming from a checkpoint
  // {"last_step": i64 []}, as PyTorch's scheduler state_dict holds last_epoch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  double current_lr(size_t group = 0) const;  // with a device counter: reads the factor (a host sync)
  double factor(int64_t step) const { return kernels::lr_schedule_factor(schedule_, step); }
  double base_lr(size_t group = 0) const { return base_lrs_.at(group); }

  // Moves the step count and the factor onto `device` (f64/i64 [1] tensors);
  // the optimizer's groups keep their base lr and read the factor on the device.
  void use_device_counter(Device device);
  bool has_device_counter() const { return device_factor_.defined(); }
  // Advances the device count unless found_inf (f32 [1], may be undefined) is non-zero.
  void step_unless(const Tensor& found_inf);
  const Tensor& device_factor() const { return device_factor_; }  // f64 [1]

 private:
  void apply();
  Optimizer& optimizer_;
  kernels::LrSchedule schedule_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
  Tensor device_step_;    // i64 [1]
  Tensor device_factor_;  // f64 [1]
};

class ConstantLr final : public LrScheduler {
 public:
  explicit ConstantLr(Optimizer& optimizer, int64_t warmup_steps = 0);
};

// Linear warmup from 0 over `warmup_steps`, then cosine decay to min_factor at total_steps.
class WarmupCosineLr final : public LrScheduler {
 public:
  WarmupCosineLr(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
};

// Multiplies the lr by gamma every step_size steps (after an optional warmup).
class StepLr final : public LrScheduler {
 public:
  StepLr(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t warmup_steps = 0);
};

}  // namespace mt::optim
