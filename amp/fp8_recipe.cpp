#include "amp/fp8_recipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "autograd/grad_mode.h"

namespace mt::amp {

using fp8::Format;
using fp8::Fp8Role;
using fp8::ScaleLayout;

using Flags = Fp8State::Flags;

// A recipe's scaling, with the statistics its quantizations leave when the
// state collects them and the last --fp8-shadow error.
class Fp8State::Scaling : public fp8::LinearScaling {
 public:
  explicit Scaling(const Flags& flags) : flags_(flags) {}
  bool wants_shadow() const final { return flags_.shadow; }
  void note_shadow_error(const Tensor& relative_error) final { shadow_error_ = relative_error; }
  // The last --fp8-shadow error (undefined when none since the last take), handed over once.
  Tensor take_shadow_error() { return std::exchange(shadow_error_, Tensor()); }
  fp8::Fp8Tensor quantize(Fp8Role role, const Tensor& x, bool with_transpose) final {
    fp8::Fp8Tensor q = quantize_operand(role, x, with_transpose);
    if (flags_.statistics) note(role, x, q);
    return q;
  }
  virtual void update() {}
  virtual void add_amaxes(std::vector<Tensor>& /*out*/) const {}
  virtual DelayedScaling* delayed(Fp8Role /*role*/) { return nullptr; }
  virtual const DelayedScaling* delayed(Fp8Role /*role*/) const { return nullptr; }
  // The scale layout each operand is quantized in.
  virtual ScaleLayout layout(Fp8Role role) const = 0;

  // What the Linear saves for backward (the memory theory).
  struct Saved {
    int64_t rows = 0;  // the most rows (M) a recorded forward had
    bool input = false, weight = false;
  };
  void note_saved_for_backward(int64_t rows, bool input, bool weight) final {
    saved_.rows = std::max(saved_.rows, rows);
    saved_.input = saved_.input || input;
    saved_.weight = saved_.weight || weight;
  }
  const Saved& saved() const { return saved_; }

  struct Counters {
    Tensor amax, counts, scale_inv;  // f32 [], f32 [2] (saturated, flushed), the last scales
    int64_t elements = 0;
  };
  std::array<Counters, 3>& counters() { return counters_; }

 protected:
  virtual fp8::Fp8Tensor quantize_operand(Fp8Role role, const Tensor& x, bool with_transpose) = 0;

 private:
  void note(Fp8Role role, const Tensor& x, const fp8::Fp8Tensor& q) {
    NoGradGuard no_grad;
    Counters& c = counters_[static_cast<size_t>(role)];
    if (!c.counts.defined()) c.counts = zeros({2}, kF32, x.device());
    fp8::count_saturated_and_flushed(x, q, c.counts);
    c.amax = fp8::amax(x);
    c.scale_inv = q.scale_inv;
    c.elements += x.numel();
  }

  const Flags& flags_;
  Tensor shadow_error_;
  std::array<Counters, 3> counters_;
  Saved saved_;
};

namespace {
constexpr std::array<std::pair<Fp8Role, const char*>, 3> kRoleNames = {
    {{Fp8Role::Input, "input"}, {Fp8Role::Weight, "weight"}, {Fp8Role::GradOutput, "grad_output"}}};
}  // namespace

namespace {

// HYBRID: E4M3 for what the forward reads, E5M2 (range) for gradients.
Format hybrid_format(Fp8Role role) { return role == Fp8Role::GradOutput ? Format::E5M2 : Format::E4M3; }

}  // namespace

// Current scaling, per tensor: scales from this call's amax.
class CurrentScaling final : public Fp8State::Scaling {
 public:
  CurrentScaling(const Flags& flags, int margin) : Scaling(flags), margin_(margin) {}
  fp8::Fp8Tensor quantize_operand(Fp8Role role, const Tensor& x, bool with_transpose) override {
    return fp8::quantize(x, hybrid_format(role), layout(role), margin_, with_transpose);
  }
  ScaleLayout layout(Fp8Role) const override { return ScaleLayout::PerTensor; }
  bool transposes(Fp8Role) const override { return true; }

 private:
  int margin_;
};

// DeepSeek-V3's block scaling: E4M3 everywhere; 1x128 tiles for activations
// and gradients (which do not transpose), 128x128 blocks for weights.
class BlockScaling final : public Fp8State::Scaling {
 public:
  explicit BlockScaling(const Flags& flags) : Scaling(flags) {}
  fp8::Fp8Tensor quantize_operand(Fp8Role role, const Tensor& x, bool /*with_transpose*/) override {
    return fp8::quantize(x, Format::E4M3, layout(role));  // tiles do not transpose; blocks copy
  }
  ScaleLayout layout(Fp8Role role) const override {
    return role == Fp8Role::Weight ? ScaleLayout::Blocks128x128 : ScaleLayout::Tiles1x128;
  }
  bool transposes(Fp8Role role) const override { return role == Fp8Role::Weight; }
};

// Delayed scaling: one amax history per operand (amp/fp8_scaling.h).
class DelayedLinearScaling final : public Fp8State::Scaling {
 public:
  DelayedLinearScaling(const Flags& flags, const DelayedScalingOptions& options, Device device)
      : Scaling(flags),
        roles_{DelayedScaling(hybrid_format(Fp8Role::Input), options, device),
               DelayedScaling(hybrid_format(Fp8Role::Weight), options, device),
               DelayedScaling(hybrid_format(Fp8Role::GradOutput), options, device)} {}
  fp8::Fp8Tensor quantize_operand(Fp8Role role, const Tensor& x, bool with_transpose) override {
    return roles_[static_cast<size_t>(role)].quantize(x, with_transpose);
  }
  ScaleLayout layout(Fp8Role) const override { return ScaleLayout::PerTensor; }
  bool transposes(Fp8Role) const override { return true; }
  void update() override {
    for (DelayedScaling& r : roles_) r.update();
  }
  void add_amaxes(std::vector<Tensor>& out) const override {
    for (const DelayedScaling& r : roles_) out.push_back(r.newest_amax());
  }
  DelayedScaling* delayed(Fp8Role role) override { return &roles_[static_cast<size_t>(role)]; }
  const DelayedScaling* delayed(Fp8Role role) const override { return &roles_[static_cast<size_t>(role)]; }

 private:
  std::array<DelayedScaling, 3> roles_;
};

std::string Fp8Recipe::name() const { return fp8_recipe_name(kind); }

std::string fp8_recipe_name(Fp8RecipeKind kind) {
  switch (kind) {
    case Fp8RecipeKind::Current: return "current";
    case Fp8RecipeKind::Delayed: return "delayed";
    case Fp8RecipeKind::Block: return "block";
  }
  return "?";
}

Fp8RecipeKind parse_fp8_recipe(const std::string& text) {
  if (text == "current") return Fp8RecipeKind::Current;
  if (text == "delayed") return Fp8RecipeKind::Delayed;
  if (text == "block") return Fp8RecipeKind::Block;
  fail("unknown FP8 recipe '{}': expected current, delayed or block", text);
}

Fp8State::Fp8State(Fp8Recipe recipe) : recipe_(recipe) {
  MT_CHECK(recipe.margin >= 0 && recipe.margin <= 64, "Fp8Recipe: margin must be from 0 to 64, got {}", recipe.margin);
}

Fp8State::~Fp8State() = default;

void Fp8State::keep_high_precision(const nn::Module& module, std::string reason) {
  for (const auto& [name, p] : module.named_parameters()) kept_[p.impl()] = {p.impl_ptr(), reason};
}

std::string Fp8State::high_precision_reason(const Tensor& weight) const {
  // A weight computed in the step (a cast, a parametrization) is a new
  // tensor every step: state keyed by it would start afresh each time and
  // pile up. Only leaves, a module's own weights, run in FP8.
  if (weight.grad_fn() != nullptr) return "its weight is computed in the step (only a module's own weights run FP8)";
  if (const auto kept = kept_.find(weight.impl()); kept != kept_.end() && !kept->second.weight.expired()) {
    return kept->second.reason;
  }
  return "";
}

fp8::LinearScaling* Fp8State::scaling_for(const Tensor& weight) {
  if (!high_precision_reason(weight).empty()) return nullptr;  // computed, or kept in high precision
  const TensorImpl* key = weight.impl();
  auto it = states_.find(key);
  if (it != states_.end() && it->second.weight.expired()) {
    states_.erase(it);  // another tensor at a dead weight's address: a new Linear
    it = states_.end();
  }
  if (it == states_.end()) {
    std::unique_ptr<Scaling> scaling;
    switch (recipe_.kind) {
      case Fp8RecipeKind::Current: scaling = std::make_unique<CurrentScaling>(flags_, recipe_.margin); break;
      case Fp8RecipeKind::Delayed:
        scaling = std::make_unique<DelayedLinearScaling>(flags_, recipe_.delayed, weight.device());
        break;
      case Fp8RecipeKind::Block: scaling = std::make_unique<BlockScaling>(flags_); break;
    }
    it = states_.emplace(key, Entry{weight.impl_ptr(), std::move(scaling), next_first_use_++}).first;
  }
  return it->second.scaling.get();
}

void Fp8State::update() {
  std::erase_if(states_, [](const auto& item) { return item.second.weight.expired(); });  // dead Linears' state
  for (auto& [key, entry] : states_) entry.scaling->update();
}

std::vector<Tensor> Fp8State::amaxes_to_reduce() const {
  // Not in states_'s order: it is by address, which differs between
  // processes, and the ranks' packed amaxes must line up Linear by Linear
  // (in address order the max mixed different Linears' amaxes).
  std::vector<const Entry*> in_order;
  for (const auto& [key, entry] : states_) in_order.push_back(&entry);
  std::sort(in_order.begin(), in_order.end(),
            [](const Entry* a, const Entry* b) { return a->first_use < b->first_use; });
  std::vector<Tensor> out;
  for (const Entry* entry : in_order) entry->scaling->add_amaxes(out);
  return out;
}

namespace {

int64_t scale_bytes(const Shape& sizes, ScaleLayout layout) { return 4 * shape_numel(fp8::scale_shape(sizes, layout)); }

// A Linear's saved input along M: its own quantization transposed, or the
// transposed tensor [K, M] quantized afresh (tiles run along M then).
int64_t saved_input_bytes(const Fp8State::Scaling& s, int64_t rows, int64_t k) {
  const Shape along_m = s.transposes(Fp8Role::Input) ? Shape{rows, k} : Shape{k, rows};
  return rows * k + scale_bytes(along_m, s.layout(Fp8Role::Input));
}

}  // namespace

Fp8MemoryTheory Fp8State::memory_theory() const {
  Fp8MemoryTheory t;
  for (const auto& [key, entry] : states_) {
    const std::shared_ptr<TensorImpl> weight = entry.weight.lock();
    if (!weight) continue;
    const Scaling& s = *entry.scaling;
    const Shape& w = weight->sizes;  // [N, K]
    if (s.saved().input) t.activations += saved_input_bytes(s, s.saved().rows, w[1]);
    if (s.saved().weight) t.weight_casts += shape_numel(w) + scale_bytes(w, s.layout(Fp8Role::Weight));
    for (const auto& [role, role_name] : kRoleNames) {
      if (const DelayedScaling* d = s.delayed(role)) t.state += 4 * (d->amax_history().numel() + 2);
    }
  }
  return t;
}

std::map<std::string, Tensor> Fp8State::state_dict(const nn::Module& model) const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto it = states_.find(p.impl());
    if (it == states_.end() || it->second.weight.expired()) continue;
    for (const auto& [role, role_name] : kRoleNames) {
      if (DelayedScaling* d = it->second.scaling->delayed(role)) {
        out[name + "." + role_name + ".amax_history"] = d->amax_history();
        out[name + "." + role_name + ".scale"] = d->scale();
      }
    }
  }
  return out;
}

void Fp8State::load_state_dict(const nn::Module& model, const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> parameters;
  for (const auto& [name, p] : model.named_parameters()) parameters[name] = p;
  size_t loaded = 0;
  for (const auto& [name, p] : parameters) {
    for (const auto& [role, role_name] : kRoleNames) {
      const std::string key = name + "." + role_name;
      const auto history = state.find(key + ".amax_history");
      const auto scale = state.find(key + ".scale");
      if (history == state.end() && scale == state.end()) continue;
      MT_CHECK(history != state.end() && scale != state.end(), "FP8 state '{}': needs both amax_history and scale",
               key);
      fp8::LinearScaling* scaling = scaling_for(p);
      MT_CHECK(scaling != nullptr, "FP8 state '{}': that Linear is kept in high precision in this run", key);
      DelayedScaling* d = static_cast<Scaling*>(scaling)->delayed(role);
      MT_CHECK(d != nullptr, "FP8 state '{}': this run's recipe ({}) keeps no amax history", key, recipe_.name());
      d->load(history->second, scale->second, "FP8 state '" + key + "'");
      loaded += 2;
    }
  }
  MT_CHECK(loaded == state.size(), "FP8 state: {} of its {} entries name no parameter of this model",
           state.size() - loaded, state.size());
}

std::vector<Fp8TensorStatistics> Fp8State::take_statistics(const nn::Module& model) {
  NoGradGuard no_grad;
  std::vector<Fp8TensorStatistics> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto it = states_.find(p.impl());
    if (it == states_.end() || it->second.weight.expired()) continue;
    for (const auto& [role, role_name] : kRoleNames) {
      Scaling::Counters& c = it->second.scaling->counters()[static_cast<size_t>(role)];
      if (c.elements == 0) continue;
      const std::vector<double> counts = c.counts.to_vector();  // the host reads: a sync
      const std::vector<double> inv = c.scale_inv.to_vector();
      const auto [lo, hi] = std::minmax_element(inv.begin(), inv.end());
      const auto n = static_cast<double>(c.elements);
      out.push_back(
          {name, role_name, c.amax.item<double>(), 1.0 / *hi, 1.0 / *lo, counts[0] / n, counts[1] / n, c.elements});
      c.counts = zeros_like(c.counts);
      c.elements = 0;
    }
  }
  return out;
}

std::vector<std::pair<std::string, double>> Fp8State::take_shadow_errors(const nn::Module& model) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto it = states_.find(p.impl());
    if (it == states_.end() || it->second.weight.expired()) continue;
    if (const Tensor error = it->second.scaling->take_shadow_error(); error.defined()) {
      out.emplace_back(name, error.item<double>());  // the host reads: a sync
    }
  }
  return out;
}

std::string Fp8State::first_nonfinite_operand(const nn::Module& model) const {
  std::string found;
  int64_t oldest = -1;  // steps ago; ties keep the first in parameter and role order
  for (const auto& [name, p] : model.named_parameters()) {
    const auto it = states_.find(p.impl());
    if (it == states_.end() || it->second.weight.expired()) continue;
    for (const auto& [role, role_name] : kRoleNames) {
      std::vector<double> amaxes;  // oldest first, the newest (this step, in progress) last
      if (DelayedScaling* d = it->second.scaling->delayed(role)) {
        const std::vector<double> h = d->amax_history().to_vector();
        amaxes.assign(h.begin() + 1, h.end());  // history[1] is the oldest step, the last slot the newest
        amaxes.push_back(h.front());
      } else if (const Scaling::Counters& c = it->second.scaling->counters()[static_cast<size_t>(role)];
                 c.amax.defined()) {
        amaxes.push_back(c.amax.item<double>());
      }
      for (size_t i = 0; i < amaxes.size(); ++i) {
        if (std::isfinite(amaxes[i])) continue;
        const auto ago = static_cast<int64_t>(amaxes.size() - 1 - i);
        if (ago > oldest) {
          oldest = ago;
          found = fmt::format("{} {}: amax {}, {} step(s) ago", name, role_name, amaxes[i], ago);
        }
        break;
      }
    }
  }
  return found;
}

Fp8Autocast::Fp8Autocast(Fp8State& state) : previous_(fp8::set_active_region(&state)) {}
Fp8Autocast::~Fp8Autocast() { fp8::set_active_region(previous_); }

}  // namespace mt::amp
