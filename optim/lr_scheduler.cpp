#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace mt::optim {

namespace {
// Linear warmup: step 0 gets 1/(warmup+1) of the lr, reaching 1 at `warmup`.
double warmup_factor(int64_t step, int64_t warmup) {
  return step < warmup ? static_cast<double>(step + 1) / static_cast<double>(warmup + 1) : 1.0;
}
}  // namespace

LrScheduler::LrScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(g.lr);
}

void LrScheduler::apply() {
  const double f = factor(step_);
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].lr = base_lrs_[i] * f;
}

void LrScheduler::step() {
  ++step_;
  apply();
}

void LrScheduler::set_step(int64_t step) {
  step_ = step;
  apply();
}

double LrScheduler::current_lr(size_t group) const { return optimizer_.param_groups().at(group).lr; }

ConstantLr::ConstantLr(Optimizer& optimizer, int64_t warmup_steps) : LrScheduler(optimizer), warmup_(warmup_steps) {
  set_step(0);
}

double ConstantLr::factor(int64_t step) const { return warmup_factor(step, warmup_); }

WarmupCosineLr::WarmupCosineLr(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor)
    : LrScheduler(optimizer), warmup_(warmup_steps), total_(std::max<int64_t>(total_steps, 1)), min_factor_(min_factor) {
  MT_CHECK(warmup_steps >= 0 && warmup_steps <= total_, "WarmupCosineLr: warmup {} must be within [0, total {}]",
           warmup_steps, total_steps);
  set_step(0);
}

double WarmupCosineLr::factor(int64_t step) const {
  if (step < warmup_) return warmup_factor(step, warmup_);
  const double span = static_cast<double>(std::max<int64_t>(total_ - warmup_, 1));
  const double progress = std::clamp(static_cast<double>(step - warmup_) / span, 0.0, 1.0);
  return min_factor_ + (1.0 - min_factor_) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

StepLr::StepLr(Optimizer& optimizer, int64_t step_size, double gamma, int64_t warmup_steps)
    : LrScheduler(optimizer), step_size_(step_size), gamma_(gamma), warmup_(warmup_steps) {
  MT_CHECK(step_size > 0, "StepLr: step_size must be positive, got {}", step_size);
  set_step(0);
}

double StepLr::factor(int64_t step) const {
  if (step < warmup_) return warmup_factor(step, warmup_);
  return std::pow(gamma_, static_cast<double>((step - warmup_) / step_size_));
}

}  // namespace mt::optim
