// Learning-rate schedules as one formula, run by the host schedulers
// (optim/lr_scheduler.h) and by the one-thread device kernel that advances a
// schedule without the host (kernels/optim/cuda.cu), so the two agree to the
// bit. The factor multiplies each param group's base lr; f64 throughout.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/macros.h"

namespace mt::kernels {

enum class LrScheduleKind : int32_t { Constant, WarmupCosine, Step };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  int64_t warmup = 0;     // linear warmup steps (all kinds)
  int64_t total = 1;      // WarmupCosine: the step where the cosine reaches min_factor
  double min_factor = 0;  // WarmupCosine
  int64_t step_size = 1;  // Step: multiply by gamma every step_size steps
  double gamma = 0.1;     // Step
};

// The multiplier of the base lr at `step` (0-based count of steps taken).
MT_HOST_DEVICE inline double lr_schedule_factor(const LrSchedule& s, int64_t step) {
  // Linear warmup: step 0 gets 1/(warmup+1) of the lr, reaching 1 at `warmup`.
  if (step < s.warmup) return static_cast<double>(step + 1) / static_cast<double>(s.warmup + 1);
  switch (s.kind) {
    case LrScheduleKind::Constant: return 1.0;
    case LrScheduleKind::WarmupCosine: {
      const int64_t span_steps = s.total - s.warmup > 1 ? s.total - s.warmup : 1;
      double progress = static_cast<double>(step - s.warmup) / static_cast<double>(span_steps);
      progress = progress < 0.0 ? 0.0 : (progress > 1.0 ? 1.0 : progress);
      constexpr double kPi = 3.14159265358979323846;
      return s.min_factor + (1.0 - s.min_factor) * 0.5 * (1.0 + ::cos(kPi * progress));
    }
    case LrScheduleKind::Step: return ::pow(s.gamma, static_cast<double>((step - s.warmup) / s.step_size));
  }
  return 1.0;
}

}  // namespace mt::kernels
