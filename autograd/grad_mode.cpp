#include "autograd/grad_mode.h"

namespace mt {
namespace {
thread_local bool grad_enabled = true;
thread_local bool inference_enabled = false;
}  // namespace

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

InferenceMode::InferenceMode() : previous_grad_(grad_enabled), previous_inference_(inference_enabled) {
  grad_enabled = false;
  inference_enabled = true;
}
InferenceMode::~InferenceMode() {
  grad_enabled = previous_grad_;
  inference_enabled = previous_inference_;
}
bool InferenceMode::is_enabled() { return inference_enabled; }

}  // namespace mt
