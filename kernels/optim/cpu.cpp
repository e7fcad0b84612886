// CPU twins of the fused optimizer kernels: the same per-element math
// (kernels/optim/math.h) in a loop over the parameter list.
#include "kernels/optim/cpu.h"

#include <cmath>

#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

// A found_inf flag (f32 [1], optional) that says: skip.
bool is_set(const Tensor& flag) { return flag.defined() && *flag.data<float>() != 0.0f; }
bool skipped(const AmpControl& amp) { return is_set(amp.found_inf); }
float inv_scale_of(const AmpControl& amp) { return amp.inv_scale.defined() ? *amp.inv_scale.data<float>() : 1.0f; }
double lr_factor_of(const AmpControl& amp) { return amp.lr_factor.defined() ? *amp.lr_factor.data<double>() : 1.0; }

// The weights an update reads and writes: the f32 master when there is one,
// else the parameter itself (pure low precision: rounded every step).
const Tensor& weights_of(const ParamSlot& s) { return s.master.defined() ? s.master : s.param; }

// Writes the updated f32 weights back: into the master (then the parameter
// gets its low-precision copy) or straight into the parameter.
void write_back(const ParamSlot& s, Updatable<float>& updated, const StochasticRounding& rounding, uint64_t& block) {
  updated.commit();
  if (!s.master.defined()) return;
  const float* w = updated.data();
  const auto n = static_cast<size_t>(s.param.numel());
  if (rounding.enabled && s.param.dtype() == kBF16) {
    auto* out = static_cast<BFloat16*>(s.param.data_ptr());
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = philox4x32_10(rounding.seed, rounding.block_offset + block + i / 4).word[i % 4];
      out[i] = BFloat16::from_bits(f32_to_bf16_stochastic(w[i], bits));
    }
    block += (n + 3) / 4;
    s.param.storage()->bump_version();
  } else {
    store(w, s.param);
  }
}

// Advances a slot's step counter and returns the new count.
float advance_step(const ParamSlot& s) {
  float& t = *s.step.data<float>();
  t += 1.0f;
  s.step.storage()->bump_version();
  return t;
}

}  // namespace

void adamw_step(const std::vector<ParamSlot>& slots, const AdamWArgs& scheduled_args, const AmpControl& amp,
                const StochasticRounding& rounding) {
  if (skipped(amp)) return;  // the device-side skip: nothing, not even the step count, changes
  AdamWArgs args = scheduled_args;
  args.lr *= lr_factor_of(amp);
  const float inv_scale = inv_scale_of(amp);
  uint64_t block = 0;
  for (const ParamSlot& s : slots) {
    const AdamWStepConstants k = adamw_step_constants(advance_step(s), args);
    Updatable<float> w(weights_of(s)), m(s.state1), v(s.state2);
    Loaded<float> g(s.grad);
    float *pw = w.data(), *pm = m.data(), *pv = v.data();
    parallel_for(g.size(), 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) adamw_update(pw[i], pm[i], pv[i], g[i] * inv_scale, k, args);
    });
    m.commit();
    v.commit();
    write_back(s, w, rounding, block);
  }
}

void sgd_step(const std::vector<ParamSlot>& slots, const SgdArgs& scheduled_args, const AmpControl& amp,
              const StochasticRounding& rounding) {
  if (skipped(amp)) return;
  SgdArgs args = scheduled_args;
  args.lr *= lr_factor_of(amp);
  const float inv_scale = inv_scale_of(amp);
  uint64_t block = 0;
  for (const ParamSlot& s : slots) {
    const bool first = advance_step(s) == 1.0f;
    Updatable<float> w(weights_of(s));
    Loaded<float> g(s.grad);
    float* pw = w.data();
    if (s.state1.defined()) {
      Updatable<float> buf(s.state1);
      float* pb = buf.data();
      parallel_for(g.size(), 4, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) sgd_update(pw[i], pb[i], g[i] * inv_scale, first, args);
      });
      buf.commit();
    } else {
      float unused = 0;
      for (int64_t i = 0; i < g.size(); ++i) sgd_update(pw[i], unused, g[i] * inv_scale, first, args);
    }
    write_back(s, w, rounding, block);
  }
}

void advance_lr_schedule(const LrSchedule& schedule, const Tensor& step_count, const Tensor& found_inf,
                         const Tensor& factor) {
  int64_t& count = *step_count.data<int64_t>();
  if (!is_set(found_inf)) ++count;
  *factor.data<double>() = lr_schedule_factor(schedule, count);
  step_count.storage()->bump_version();
  factor.storage()->bump_version();
}

void sum_of_squares(const std::vector<Tensor>& tensors, const Tensor& out) {
  double total = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    Loaded<float> v(t);
    for (int64_t i = 0; i < v.size(); ++i) total += static_cast<double>(v[i]) * v[i];
  }
  *out.data<float>() = static_cast<float>(total);
  out.storage()->bump_version();
}

void scale_by_clip_coefficient(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) {
  const double norm = *total_norm.data<float>();
  const double coefficient = std::min(1.0, max_norm / (norm + 1e-6));  // NaN norm stays NaN: the step is skipped later
  const auto c = static_cast<float>(std::isnan(norm) ? norm : coefficient);
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    Updatable<float> v(t);
    float* p = v.data();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] *= c;
    v.commit();
  }
}

}  // namespace mt::kernels::cpu
