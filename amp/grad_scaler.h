// GradScaler: dynamic loss scaling for f16 training, as PyTorch's, native.
//
//   mt::amp::GradScaler scaler;                 // 65536, x2 growth, x0.5 backoff, 2000-step interval
//   scaler.scale(loss).backward();              // gradients are 65536x larger: small ones survive f16
//   scaler.unscale_(optimizer);                 // optional: only needed before clipping
//   mt::optim::clip_grad_norm_(params, 1.0);
//   scaler.step(optimizer);                     // skipped on the device if any gradient is inf/NaN
//   scaler.update();                            // back off on inf, grow after 2000 clean steps
//
// Nothing here reads a device value on the host: the scale, the growth
// tracker and each optimizer's found_inf flag are device tensors, unscale_ is
// one fused multi-tensor kernel, the optimizer kernel reads found_inf itself,
// and update() is a one-thread kernel. Reading a value on the host is a sync:
// StepOutcome::skipped(), get_scale(), and the collapse warning's read of the
// scale every collapse_check_interval updates (0 turns it off). An LR
// scheduler that must not advance on a skipped step can count on the device
// instead (LrScheduler::step_unless(outcome.found_inf())), and so can
// BatchNorm's running statistics, which an overflowing batch would otherwise
// poison for good (nn::commit_batch_norm_statistics_unless, nn/layers.h).
//
// Per optimizer the scaler moves READY -> UNSCALED -> STEPPED and back to
// READY at update(); the misuses PyTorch rejects are errors here too.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace mt::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  double min_scale = 0;  // optional bounds (0 = none, PyTorch has none)
  double max_scale = 0;
  // Every this many update() calls the scale is read once (a sync) to warn
  // when it keeps collapsing; 0 disables the check.
  int64_t collapse_check_interval = 100;
};

// What step() did. skipped() reads the device flag (a sync); found_inf() doesn't.
class StepOutcome {
 public:
  StepOutcome() = default;
  explicit StepOutcome(Tensor found_inf) : found_inf_(std::move(found_inf)) {}
  bool skipped() const;
  const Tensor& found_inf() const { return found_inf_; }

 private:
  Tensor found_inf_;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  ~GradScaler();
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  Tensor scale(const Tensor& loss);
  void unscale_(optim::Optimizer& optimizer);
  StepOutcome step(optim::Optimizer& optimizer);
  void update();
  void update(double new_scale);

  // --explain-skips: the fused inf check also flags each gradient that held
  // an inf or NaN (same pass, no extra read on the host). After step() (or
  // unscale_), nonfinite_gradients() gives those flags, f32 [n] on the
  // device, one per optimizer parameter (0 for one without a gradient), so a
  // skipped step can name the layers that overflowed.
  void track_nonfinite_gradients(bool on) { track_nonfinite_ = on; }
  struct NonfiniteGradients {
    Tensor flags;                    // f32 [n], 1 where that parameter's gradient was not finite
    std::vector<Tensor> parameters;  // the optimizer's parameters, in its order (flags[i] is parameters[i]'s)
  };
  NonfiniteGradients nonfinite_gradients(const optim::Optimizer& optimizer) const;

  bool is_enabled() const { return options_.enabled; }
  double get_scale() const;  // reads the device value (a sync); 1 when disabled
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker() const { return growth_tracker_; }

  // scale, growth_tracker, growth_factor, backoff_factor, growth_interval.
  optim::StateDict state_dict() const;
  void load_state_dict(const optim::StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;
    NonfiniteGradients nonfinite;  // with track_nonfinite_gradients
  };
  // The fused inf check (and unscale, when inv_scale is defined) of
  // optimizer's gradients into s.found_inf.
  void check_gradients(optim::Optimizer& optimizer, PerOptimizer& s, const Tensor& inv_scale);

  void ensure_state(Device device);
  PerOptimizer& state_of(const optim::Optimizer& optimizer);
  Tensor inverse_scale() const;
  void check_for_collapse();

  GradScalerOptions options_;
  Tensor scale_;                        // f32 [1] on the device of the first scaled loss
  Tensor growth_tracker_;               // i32 [1]
  int64_t initial_growth_tracker_ = 0;  // from load_state_dict before the state exists
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  int64_t updates_since_check_ = 0;
  double scale_at_last_check_ = 0;
  bool track_nonfinite_ = false;
};

}  // namespace mt::amp
