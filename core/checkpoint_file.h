// A training checkpoint in one call: named parts (a model, an optimizer, a
// GradScaler, an LR scheduler: anything with PyTorch's state_dict() and
// load_state_dict()) in one safetensors file, as torch.save of a dict of
// state dicts is in PyTorch:
//
//   mt::save_checkpoint("run.safetensors",
//                       {{"model", model}, {"optimizer", opt}, {"scaler", scaler}, {"scheduler", sched}});
//   ...
//   mt::load_checkpoint("run.safetensors",
//                       {{"model", model}, {"optimizer", opt}, {"scaler", scaler}, {"scheduler", sched}});
//
// The layout is `mixtape train --save`'s: the part named "model" keeps its
// own names (PyTorch's, so the file loads into a PyTorch model of the same
// architecture), every other part is stored under "<name>.". The default
// generator's state goes into the metadata ("rng_seed", "rng_offset", as the
// CLI writes it) and comes back on load, so a resumed run draws the dropout
// masks it would have drawn. Loading is strict: every stored tensor must
// belong to a part and every part must find its tensors (each part's
// load_state_dict then checks shapes and values), and a floating-point
// tensor holding NaN or inf is refused. The file and every part's presence
// are checked before any part is loaded; a part that refuses its
// tensors is named in the error (the parts before it are loaded by then). A
// CLI checkpoint loads this way too (its scheduler position is metadata, not
// a part: pass the model, "optimizer" and "scaler").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mt {

using TensorMap = std::map<std::string, Tensor>;

// Anything with `TensorMap state_dict() const` and `load_state_dict(const TensorMap&)`, by reference.
class StatefulRef {
 public:
  template <typename T>
  StatefulRef(T& object)  // NOLINT(google-explicit-constructor): {{"model", model}} reads like PyTorch
      : save_([&object] { return TensorMap(object.state_dict()); }),
        load_([&object](const TensorMap& state) { object.load_state_dict(state); }) {}
  template <typename T>
  StatefulRef(const std::shared_ptr<T>& object) : StatefulRef(*object) {}  // NOLINT

  TensorMap state_dict() const { return save_(); }
  void load_state_dict(const TensorMap& state) const { load_(state); }

 private:
  std::function<TensorMap()> save_;
  std::function<void(const TensorMap&)> load_;
};

using CheckpointParts = std::vector<std::pair<std::string, StatefulRef>>;

// Written atomically (a temporary file renamed over `path`); `path` may be the file a run resumed from.
void save_checkpoint(const std::string& path, const CheckpointParts& parts);
void load_checkpoint(const std::string& path, const CheckpointParts& parts);

}  // namespace mt
