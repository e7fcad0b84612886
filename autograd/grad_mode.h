// Thread-local switches for recording on the tape.
#pragma once

namespace mt {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Inside its scope no op records a tape node (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Re-enables recording inside a NoGradGuard (e.g. activation recompute).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Inference: no recording while it is active, like torch.inference_mode.
// (Unlike PyTorch, tensors made inside are not marked: they can join a
// graph later as constants.)
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled();

 private:
  bool previous_grad_;
  bool previous_inference_;
};

}  // namespace mt
