#include "autograd/anomaly.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/module_path.h"
#include "autograd/node.h"
#include "kernels/amp/amp.h"

namespace mt {
namespace {
thread_local bool anomaly_enabled = false;
thread_local bool stop_in_scaled = false;
thread_local std::string backward_overflow;
thread_local bool overflow_noted_this_backward = false;
}  // namespace

AnomalyMode::AnomalyMode(bool enabled, bool stop_in_scaled_backward)
    : previous_enabled_(anomaly_enabled), previous_stop_scaled_(stop_in_scaled) {
  anomaly_enabled = enabled;
  stop_in_scaled = stop_in_scaled_backward;
  if (anomaly_enabled) autograd::detail::add_module_path_user(1);
}

AnomalyMode::~AnomalyMode() {
  if (anomaly_enabled) autograd::detail::add_module_path_user(-1);
  anomaly_enabled = previous_enabled_;
  stop_in_scaled = previous_stop_scaled_;
}

bool AnomalyMode::is_enabled() { return anomaly_enabled; }

namespace autograd {
namespace {

// True when every element is finite: the scaler's fused check, in check-only
// mode, on the tensor's own device, and one flag read back.
bool all_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return true;
  NoGradGuard no_grad;
  const Tensor flag = zeros({1}, kF32, t.device());
  kernels::unscale_and_check_inf({t}, flag, Tensor());
  return flag.item<float>() == 0.0f;
}

// "f16 [4, 8]: range [-3.1, 7.2], 2 NaN, 1 inf" — read on the host, only
// once something is already wrong.
std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string text = fmt::format("{} {}", t.dtype(), t.shape_string());
  if (!is_floating(t.dtype()) || t.numel() == 0) return text;
  NoGradGuard no_grad;
  const std::vector<double> values = t.to(kCPU).to(kF64).to_vector();
  double low = std::numeric_limits<double>::infinity(), high = -low;
  int64_t nans = 0, infs = 0;
  for (const double v : values) {
    if (std::isnan(v)) {
      ++nans;
    } else if (std::isinf(v)) {
      ++infs;
    } else {
      low = std::min(low, v), high = std::max(high, v);
    }
  }
  text += nans + infs < static_cast<int64_t>(values.size()) ? fmt::format(": finite range [{:.4g}, {:.4g}]", low, high)
                                                            : ": no finite value";
  if (nans > 0) text += fmt::format(", {} NaN", nans);
  if (infs > 0) text += fmt::format(", {} inf", infs);
  return text;
}

std::string describe_all(const std::vector<Tensor>& tensors) {
  std::string text;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) continue;
    text += fmt::format("\n  input {}: {}", i, describe(tensors[i]));
  }
  return text;
}

}  // namespace

void check_forward_output(const char* op, const std::vector<Tensor>& inputs, const Tensor& output) {
  if (!anomaly_enabled || all_finite(output)) return;
  bool inputs_finite = true;
  for (const Tensor& t : inputs) inputs_finite = inputs_finite && all_finite(t);
  throw AnomalyError(fmt::format(
      "anomaly mode: the forward of {} in module {} {} (output {}).{}", op,
      module_path_for_display(current_module_path()),
      inputs_finite ? "produced a non-finite value from finite inputs" : "passed on non-finite values it was given",
      describe(output), describe_all(inputs)));
}

void check_backward_gradients(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grads) {
  if (!anomaly_enabled) return;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (all_finite(grads[i])) continue;
    const std::string where = fmt::format("the backward of {} (its forward ran in module {})", node.name(),
                                          module_path_for_display(node.forward_module()));
    if (in_loss_scaled_backward() && !stop_in_scaled) {
      // The GradScaler skips this step; name the first overflow once per backward.
      if (overflow_noted_this_backward) return;
      overflow_noted_this_backward = true;
      backward_overflow = fmt::format("{} overflowed: gradient {} {}", where, i, describe(grads[i]));
      spdlog::warn("anomaly mode: in a loss-scaled backward, {} (the GradScaler will skip the step)",
                   backward_overflow);
      return;
    }
    throw AnomalyError(
        fmt::format("anomaly mode: {} produced a non-finite gradient for input {} ({}); the gradient "
                    "it was given: {}",
                    where, i, describe(grads[i]), describe(grad_output)));
  }
}

const std::string& last_backward_overflow() { return backward_overflow; }

namespace detail {
void start_backward_check() { overflow_noted_this_backward = false; }
}  // namespace detail

}  // namespace autograd
}  // namespace mt
