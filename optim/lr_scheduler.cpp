#include "optim/lr_scheduler.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt::optim {

LrScheduler::LrScheduler(Optimizer& optimizer, kernels::LrSchedule schedule)
    : optimizer_(optimizer), schedule_(schedule) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(*g.lr);
  set_step(0);
}

void LrScheduler::apply() {
  auto& groups = optimizer_.param_groups();
  if (has_device_counter()) {
    // The factor is applied on the device; the groups keep their base lr.
    for (size_t i = 0; i < groups.size(); ++i) groups[i].lr = base_lrs_[i];
    return;
  }
  const double f = factor(step_);
  for (size_t i = 0; i < groups.size(); ++i) groups[i].lr = base_lrs_[i] * f;
}

void LrScheduler::step() {
  MT_CHECK(!has_device_counter(), "LrScheduler::step: this scheduler counts on the device; call step_unless()");
  ++step_;
  apply();
}

int64_t LrScheduler::last_step() const {
  return has_device_counter() ? static_cast<int64_t>(device_step_.item<double>()) : step_;
}

StateDict LrScheduler::state_dict() const {
  return {{"last_step", from_vector(std::vector<int64_t>{last_step()}, {}, kI64)}};
}

void LrScheduler::load_state_dict(const StateDict& state) {
  MT_CHECK(state.size() == 1 && state.count("last_step") == 1,
           "LrScheduler::load_state_dict: expects exactly 'last_step', got {} entries", state.size());
  const Tensor& t = state.at("last_step");
  MT_CHECK(t.numel() == 1 && !is_floating(t.dtype()),
           "LrScheduler::load_state_dict: 'last_step' must be one integer, got {} {}", t.dtype(), t.shape_string());
  set_step(static_cast<int64_t>(t.to(kCPU).item<double>()));
}

void LrScheduler::set_step(int64_t step) {
  MT_CHECK(step >= 0, "LrScheduler::set_step: the step must be non-negative, got {}", step);
  step_ = step;
  if (has_device_counter()) {
    NoGradGuard no_grad;
    fill_(device_step_, static_cast<double>(step));
    fill_(device_factor_, factor(step));
  }
  apply();
}

double LrScheduler::current_lr(size_t group) const {
  const double f = has_device_counter() ? device_factor_.item<double>() : 1.0;
  return *optimizer_.param_groups().at(group).lr * f;
}

void LrScheduler::use_device_counter(Device device) {
  device_step_ = full({1}, static_cast<double>(step_), kI64, device);
  device_factor_ = full({1}, factor(step_), kF64, device);
  optimizer_.set_lr_factor(device_factor_);
  apply();
}

void LrScheduler::step_unless(const Tensor& found_inf) {
  MT_CHECK(has_device_counter(), "LrScheduler::step_unless: call use_device_counter(device) first");
  kernels::advance_lr_schedule(schedule_, device_step_, found_inf, device_factor_);
}

namespace {
kernels::LrSchedule constant(int64_t warmup) { return {.kind = kernels::LrScheduleKind::Constant, .warmup = warmup}; }
kernels::LrSchedule cosine(int64_t warmup, int64_t total, double min_factor) {
  MT_CHECK(warmup >= 0 && warmup <= std::max<int64_t>(total, 1),
           "WarmupCosineLr: warmup {} must be within [0, total {}]", warmup, total);
  return {.kind = kernels::LrScheduleKind::WarmupCosine,
          .warmup = warmup,
          .total = std::max<int64_t>(total, 1),
          .min_factor = min_factor};
}
kernels::LrSchedule stepped(int64_t step_size, double gamma, int64_t warmup) {
  MT_CHECK(step_size > 0, "StepLr: step_size must be positive, got {}", step_size);
  return {.kind = kernels::LrScheduleKind::Step, .warmup = warmup, .step_size = step_size, .gamma = gamma};
}
}  // namespace

ConstantLr::ConstantLr(Optimizer& optimizer, int64_t warmup_steps) : LrScheduler(optimizer, constant(warmup_steps)) {}

WarmupCosineLr::WarmupCosineLr(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor)
    : LrScheduler(optimizer, cosine(warmup_steps, total_steps, min_factor)) {}

StepLr::StepLr(Optimizer& optimizer, int64_t step_size, double gamma, int64_t warmup_steps)
    : LrScheduler(optimizer, stepped(step_size, gamma, warmup_steps)) {}

}  // namespace mt::optim
