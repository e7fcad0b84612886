// Anomaly mode: stop at the first non-finite value the tape sees.
//
//   mt::AnomalyMode anomaly;                  // or `mixtape train --detect-anomaly`
//   auto loss = model.forward(x);             // throws AnomalyError naming the op
//   loss.backward();                          // ... or the backward that made a NaN
//
// Forward: every op that records a tape node checks its output; the first
// output holding NaN or inf is an AnomalyError naming the op, the module
// whose forward ran it (`blocks.3.attn`), the dtype it ran in and the range
// of each input, so "the input already held inf" and "the op produced it"
// read differently. Ops on tensors that take no part in autograd record no
// node and are not checked: a NaN in the data shows at the first op that
// meets a parameter.
// Backward: every node's gradients are checked, and the error names the
// backward and the forward op (and module) that recorded it. Inside a
// GradScaler-scaled backward an inf is the scaler's business (it skips the
// step and lowers the scale), so there the first overflowing node is noted
// (last_backward_overflow(), a warning) instead of thrown, unless
// `stop_in_scaled_backward` asks for it.
// Each check reads one flag back from the device (a sync), so this is a
// debugging mode, off by default; off, it costs one thread-local test per op.
#pragma once

#include <string>
#include <vector>

#include "runtime/error.h"
#include "core/tensor.h"

namespace mt {

class AnomalyError : public Error {
 public:
  using Error::Error;
};

class AnomalyMode {
 public:
  explicit AnomalyMode(bool enabled = true, bool stop_in_scaled_backward = false);
  ~AnomalyMode();
  AnomalyMode(const AnomalyMode&) = delete;
  AnomalyMode& operator=(const AnomalyMode&) = delete;
  static bool is_enabled();

 private:
  bool previous_enabled_, previous_stop_scaled_;
};

namespace autograd {

class Node;

// The forward check, run by record() on each recorded op's output.
void check_forward_output(const char* op, const std::vector<Tensor>& inputs, const Tensor& output);
// The backward check, run by the engine on each node's gradients.
void check_backward_gradients(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grads);
// The first node whose gradient overflowed in the last scaled backward with
// anomaly mode on ("" when none did); the trainer's NaN-loss stop quotes it.
const std::string& last_backward_overflow();

namespace detail {
// The engine calls it as the outermost backward starts (one overflow note per backward).
void start_backward_check();
}  // namespace detail

}  // namespace autograd
}  // namespace mt
