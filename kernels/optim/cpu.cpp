// CPU twins of the fused optimizer kernels: the same per-element math
// (kernels/optim/math.h) in a loop over the parameter list.
#include "kernels/optim/cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

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

// A NaN moment keeps its block's absmax NaN, as on the device.
float max_keep_nan(float a, float b) { return (b > a || b != b) ? b : a; }

const float* code_table(bool is_signed) { return dynamic_codes().data() + (is_signed ? 0 : kCodeEntries); }

// Quantizes one block of values into `out` against the block's absmax, which it returns.
float quantize_block(const float* values, int64_t count, bool is_signed, uint8_t* out) {
  float absmax = 0.0f;
  for (int64_t j = 0; j < count; ++j) absmax = max_keep_nan(absmax, std::fabs(values[j]));
  const float* code = code_table(is_signed);
  const uint8_t zero = is_signed ? kSignedZeroCode : kUnsignedZeroCode;
  for (int64_t j = 0; j < count; ++j) out[j] = quantize_state(code, values[j], absmax, zero);
  return absmax;
}

// Advances a slot's step counter and returns the new count.
float advance_step(const ParamSlot& s) {
  float& t = *s.step.data<float>();
  t += 1.0f;
  s.step.storage()->bump_version();
  return t;
}

// Block-wise 8-bit moments: per block, dequantize -> update -> new absmax ->
// quantize, the block held in f32 in between (state_format.h).
template <int States, typename Update>
void update_int8_moments(const ParamSlot& s, Update&& update) {
  const std::array<const Tensor*, 2> codes_of{&s.state1, &s.state2};
  const std::array<const Tensor*, 2> absmax_of{&s.absmax1, &s.absmax2};
  const int64_t n = s.param.numel(), block = s.state_block;
  std::array<uint8_t*, States> codes{};
  std::array<float*, States> absmax{};
  std::array<const float*, States> code{};
  for (int k = 0; k < States; ++k) {
    codes[k] = static_cast<uint8_t*>(codes_of[k]->data_ptr());
    absmax[k] = static_cast<float*>(absmax_of[k]->data_ptr());
    code[k] = code_table(k == 0);  // exp_avg / momentum signed, exp_avg_sq unsigned
  }
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, block * 8, [&](int64_t first, int64_t last) {
    std::vector<float> values(static_cast<size_t>(States * block));
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block, count = std::min(block, n - begin);
      for (int64_t j = 0; j < count; ++j) {
        float m[States];
        for (int k = 0; k < States; ++k) m[k] = dequantize_state(code[k], codes[k][begin + j], absmax[k][b]);
        update(begin + j, m);
        for (int k = 0; k < States; ++k) values[static_cast<size_t>(k * block + j)] = m[k];
      }
      for (int k = 0; k < States; ++k) {
        absmax[k][b] = quantize_block(&values[static_cast<size_t>(k * block)], count, k == 0, codes[k] + begin);
      }
    }
  });
  for (int k = 0; k < States; ++k) {
    codes_of[k]->storage()->bump_version();
    absmax_of[k]->storage()->bump_version();
  }
}

// The moments of one slot as f32 values the update can change, whatever
// their storage format: update(i, moments) runs once per element, with
// moments[k] read from state k and written back after (States: 1 for SGD's
// momentum, 2 for AdamW's exp_avg and exp_avg_sq).
template <int States, typename Update>
void update_moments(const ParamSlot& s, float step, Update&& update) {
  const std::array<const Tensor*, 2> stored{&s.state1, &s.state2};
  const int64_t n = s.param.numel();
  if (s.state_format == StateFormat::Int8Blockwise) return update_int8_moments<States>(s, update);
  if (s.state_format == StateFormat::Bf16Stochastic) {
    std::array<uint16_t*, States> bits{};
    for (int k = 0; k < States; ++k) bits[k] = static_cast<uint16_t*>(stored[k]->data_ptr());
    parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float m[States];
        for (int k = 0; k < States; ++k) m[k] = bf16_bits_to_f32(bits[k][i]);
        update(i, m);
        const PhiloxBlock random = philox4x32_10(s.state_key, state_rounding_block(step, i));
        for (int k = 0; k < States; ++k) bits[k][i] = f32_to_bf16_stochastic(m[k], random.word[2 * (i % 2) + k]);
      }
    });
    for (int k = 0; k < States; ++k) stored[k]->storage()->bump_version();
    return;
  }
  std::vector<Updatable<float>> plain;
  plain.reserve(States);
  std::array<float*, States> values{};
  for (int k = 0; k < States; ++k) values[k] = plain.emplace_back(*stored[k]).data();
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float m[States];
      for (int k = 0; k < States; ++k) m[k] = values[k][i];
      update(i, m);
      for (int k = 0; k < States; ++k) values[k][i] = m[k];
    }
  });
  for (auto& p : plain) p.commit();
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
    const float step = advance_step(s);
    const AdamWStepConstants k = adamw_step_constants(step, args);
    Updatable<float> w(weights_of(s));
    Loaded<float> g(s.grad);
    float* pw = w.data();
    update_moments<2>(s, step, [&](int64_t i, float (&m)[2]) {
      adamw_update(pw[i], m[0], m[1], g[i] * inv_scale, k, args);
    });
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
    const float step = advance_step(s);
    const bool first = step == 1.0f;
    Updatable<float> w(weights_of(s));
    Loaded<float> g(s.grad);
    float* pw = w.data();
    if (s.state1.defined()) {
      update_moments<1>(s, step, [&](int64_t i, float (&buf)[1]) {
        sgd_update(pw[i], buf[0], g[i] * inv_scale, first, args);
      });
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

Tensor dequantize_blockwise(const Tensor& codes, const Tensor& absmax, int64_t block, bool is_signed) {
  MT_CHECK(codes.dtype() == kU8 && absmax.dtype() == kF32 && codes.device().is_cpu() && absmax.device().is_cpu(),
           "dequantize_blockwise: expected u8 codes and f32 absmax on the CPU");
  const Tensor c = codes.contiguous(), a = absmax.contiguous();
  const int64_t n = c.numel();
  MT_CHECK(block > 0 && a.numel() == (n + block - 1) / block,
           "dequantize_blockwise: {} values in blocks of {} need {} absmax values, got {}", n, block,
           block > 0 ? (n + block - 1) / block : 0, a.numel());
  Tensor out = empty(codes.sizes(), kF32);
  const auto* in = static_cast<const uint8_t*>(c.data_ptr());
  const auto* scale = static_cast<const float*>(a.data_ptr());
  auto* values = static_cast<float*>(out.data_ptr());
  const float* code = code_table(is_signed);
  for (int64_t i = 0; i < n; ++i) values[i] = dequantize_state(code, in[i], scale[i / block]);
  return out;
}

void quantize_blockwise(const Tensor& values, int64_t block, bool is_signed, const Tensor& codes,
                        const Tensor& absmax) {
  MT_CHECK(values.dtype() == kF32 && values.is_contiguous() && codes.dtype() == kU8 && codes.is_contiguous() &&
               absmax.dtype() == kF32 && absmax.is_contiguous() && codes.numel() == values.numel() &&
               absmax.numel() == (values.numel() + block - 1) / block,
           "quantize_blockwise: expected contiguous f32 values, u8 codes of the same size and one f32 absmax per "
           "block of {}",
           block);
  const int64_t n = values.numel();
  const auto* in = static_cast<const float*>(values.data_ptr());
  auto* out = static_cast<uint8_t*>(codes.data_ptr());
  auto* scale = static_cast<float*>(absmax.data_ptr());
  for (int64_t b = 0; b * block < n; ++b) {
    scale[b] = quantize_block(in + b * block, std::min(block, n - b * block), is_signed, out + b * block);
  }
  codes.storage()->bump_version();
  absmax.storage()->bump_version();
}

}  // namespace mt::kernels::cpu
