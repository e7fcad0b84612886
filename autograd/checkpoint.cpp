#include "autograd/checkpoint.h"

#include <optional>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/generator.h"

namespace mt {
namespace {

// The autocast state of one device slot at the checkpointed forward.
struct AutocastState {
  Device device;
  bool enabled;
  DType dtype;
};

std::vector<AutocastState> autocast_state(const std::vector<Tensor>& inputs) {
  std::vector<AutocastState> states = {{kCPU, amp::is_autocast_enabled(kCPU), amp::autocast_dtype(kCPU)}};
  for (const Tensor& t : inputs) {
    if (t.defined() && !t.device().is_cpu()) {
      states.push_back({t.device(), amp::is_autocast_enabled(t.device()), amp::autocast_dtype(t.device())});
      break;
    }
  }
  return states;
}

// Re-opens the recorded autocast state (nested inside the engine's own
// disabled regions) for as long as it lives.
class AutocastReplay {
 public:
  explicit AutocastReplay(const std::vector<AutocastState>& states) {
    host_.emplace(states[0].device, states[0].dtype, states[0].enabled);
    if (states.size() > 1) device_.emplace(states[1].device, states[1].dtype, states[1].enabled);
  }

 private:
  std::optional<amp::Autocast> host_, device_;  // nested: device_ is closed first
};

// Sets the default generator to `state` for as long as it lives, then puts
// the stream back where it was (the recomputation must not shift later draws).
class GeneratorReplay {
 public:
  explicit GeneratorReplay(GeneratorState state) : now_(default_generator().state()) {
    default_generator().set_state(state);
  }
  ~GeneratorReplay() { default_generator().set_state(now_); }

 private:
  GeneratorState now_;
};

thread_local int recomputations = 0;  // checkpoints rerunning on this thread (they nest)

class Recomputing {
 public:
  Recomputing() { ++recomputations; }
  ~Recomputing() { --recomputations; }
  Recomputing(const Recomputing&) = delete;
  Recomputing& operator=(const Recomputing&) = delete;
};

}  // namespace

bool checkpoint_recomputing() { return recomputations > 0; }

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  if (!autograd::needs_grad(inputs)) return fn(inputs);
  const std::vector<AutocastState> autocast = autocast_state(inputs);
  const GeneratorState rng = default_generator().state();
  std::vector<Tensor> detached;
  for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : Tensor());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(detached);
  }
  MT_CHECK(out.defined() && is_floating(out.dtype()), "checkpoint: fn must return a floating tensor");
  std::vector<autograd::SavedTensor> saved;
  std::vector<bool> wants_grad;
  for (const Tensor& t : inputs) {
    saved.push_back(autograd::save(t.defined() ? t.detach() : Tensor()));
    wants_grad.push_back(t.defined() && (t.requires_grad() || t.grad_fn() != nullptr));
  }
  // A meta-op: the ops inside made their own autocast decisions, so the node
  // is recorded directly. saves: the inputs (the segment is recomputed in backward).
  return autograd::record_node("checkpoint", out, inputs,
                               [fn, saved, wants_grad, autocast, rng](const Tensor& g) -> std::vector<Tensor> {
                                 std::vector<Tensor> again;
                                 for (size_t i = 0; i < saved.size(); ++i) {
                                   Tensor x = saved[i].get();
                                   if (x.defined()) x = x.detach();
                                   if (x.defined() && wants_grad[i]) x.requires_grad_();
                                   again.push_back(x);
                                 }
                                 Tensor y;
                                 {
                                   const EnableGradGuard recording;
                                   const AutocastReplay same_autocast(autocast);
                                   const GeneratorReplay same_stream(rng);
                                   const Recomputing side_effects_done_once;
                                   y = fn(again);
                                 }
                                 // The recomputed graph's leaf gradients are scaled when the outer backward's are.
                                 y.impl()->loss_scaled = autograd::in_loss_scaled_backward();
                                 autograd::backward(y, g, /*retain_graph=*/false);
                                 std::vector<Tensor> grads;
                                 for (const Tensor& x : again)
                                   grads.push_back(x.defined() && x.requires_grad() ? x.grad() : Tensor());
                                 return grads;
                               });
}

}  // namespace mt
