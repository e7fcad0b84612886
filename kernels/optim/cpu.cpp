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
void write_back(const ParamSlot& s, Updatable<float>& updated, const StochasticRounding& rounding, float step) {
  updated.commit();
  if (!s.master.defined()) return;
  const float* w = updated.data();
  const auto n = static_cast<int64_t>(s.param.numel());
  if (rounding.enabled && s.param.dtype() == kBF16) {
    auto* out = static_cast<BFloat16*>(s.param.data_ptr());
    const uint64_t key = param_rounding_key(s.rounding_key);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = philox4x32_10(key, param_rounding_block(step, i)).word[i % 4];
      out[i] = BFloat16::from_bits(f32_to_bf16_stochastic(w[i], bits));
    }
    s.param.storage()->bump_version();
  } else {
    store(w, s.param);
  }
}

const float* code_table(bool is_signed) { return dynamic_codes().data() + (is_signed ? 0 : kCodeEntries); }

// The nearest code, as nearest_code finds it, found faster: a 65536-entry
// table indexed by x's top 16 bits (sign, exponent, 7 mantissa bits: its
// bf16 bits) holds the largest index whose value is <= the smallest x of
// that bucket; a bucket is narrower than the gap between codes, so a step
// or two up finds the largest index <= x itself. From there the decision
// is nearest_code's, comparison for comparison, so the CPU and the kernels
// (which search) pick the same byte.
struct CodeLookup {
  std::vector<uint8_t> lower;  // [65536]
  explicit CodeLookup(const float* code) : lower(65536) {
    for (uint32_t key = 0; key < 65536; ++key) {
      const bool negative = (key & 0x8000u) != 0;
      // The bucket's smallest value: its first float if positive, its last (largest magnitude) if negative;
      // -inf for the buckets of infinities and NaNs (a NaN's nearest code is entry 0, as the search finds).
      float smallest = bits_float(negative ? (key << 16) | 0xffffu : key << 16);
      if ((key & 0x7f80u) == 0x7f80u) smallest = -INFINITY;
      int lo = 0;
      while (lo < kCodeEntries - 1 && code[lo + 1] <= smallest) ++lo;
      lower[key] = static_cast<uint8_t>(lo);
    }
  }
};

uint8_t nearest_code_by_table(const float* code, const uint8_t* lower, float x) {
  int lo = lower[float_bits(x) >> 16];
  while (lo < kCodeEntries - 1 && code[lo + 1] <= x) ++lo;
  if (lo == kCodeEntries - 1 || x <= code[0]) return static_cast<uint8_t>(lo);
  return static_cast<uint8_t>(code[lo + 1] - x < x - code[lo] ? lo + 1 : lo);
}

const uint8_t* lookup_table(bool is_signed) {
  static const CodeLookup signed_lookup(code_table(true)), unsigned_lookup(code_table(false));
  return (is_signed ? signed_lookup : unsigned_lookup).lower.data();
}

// Quantizes one block of values into `out` against the block's absmax, which it returns.
// `values` is scratch: it is left divided by the absmax.
float quantize_block(float* values, int64_t count, bool is_signed, uint8_t* out) {
  // The max and "any NaN" apart, so both loops vectorise; a NaN keeps the absmax NaN, as on the device.
  float absmax = 0.0f;
  bool any_nan = false;
  for (int64_t j = 0; j < count; ++j) {
    absmax = std::max(absmax, std::fabs(values[j]));
    any_nan |= values[j] != values[j];
  }
  if (any_nan) absmax = NAN;
  const uint8_t zero = is_signed ? kSignedZeroCode : kUnsignedZeroCode;
  if (!(absmax > 0.0f)) {
    std::fill(out, out + count, zero);
    return absmax;
  }
  for (int64_t j = 0; j < count; ++j) values[j] /= absmax;
  const float* code = code_table(is_signed);
  const uint8_t* lower = lookup_table(is_signed);
  for (int64_t j = 0; j < count; ++j) out[j] = nearest_code_by_table(code, lower, values[j]);
  return absmax;
}

// The update over a range of elements. Its arrays never overlap and its
// constants are values, not references the stores might change, so the loop
// vectorises (8 lanes with AVX2).
void adamw_range(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
                 int64_t count, float inv_scale, AdamWStepConstants k, AdamWArgs args) {
  for (int64_t j = 0; j < count; ++j) adamw_update(w[j], m[j], v[j], g[j] * inv_scale, k, args);
}
void sgd_range(float* __restrict w, float* __restrict buf, const float* __restrict g, int64_t count, float inv_scale,
               bool first, SgdArgs args) {
  for (int64_t j = 0; j < count; ++j) sgd_update(w[j], buf[j], g[j] * inv_scale, first, args);
}

// Advances a slot's step counter and returns the new count.
float advance_step(const ParamSlot& s) {
  float& t = *s.step.data<float>();
  t += 1.0f;
  s.step.storage()->bump_version();
  return t;
}

// Values per chunk of the BF16 path's f32 scratch.
constexpr int64_t kScratch = kMaxStateBlock;

// Block-wise 8-bit moments: per block, dequantize -> update -> new absmax ->
// quantize, the block held in f32 in between (state_format.h).
template <int States, typename UpdateRange>
void update_int8_moments(const ParamSlot& s, UpdateRange&& update) {
  const std::array<const Tensor*, 2> codes_of{&s.state1, &s.state2};
  const std::array<const Tensor*, 2> absmax_of{&s.absmax1, &s.absmax2};
  const int64_t n = s.param.numel(), block = s.state_block;
  std::array<uint8_t*, States> codes{};
  std::array<float*, States> absmax{};
  for (int k = 0; k < States; ++k) {
    codes[k] = static_cast<uint8_t*>(codes_of[k]->data_ptr());
    absmax[k] = static_cast<float*>(absmax_of[k]->data_ptr());
  }
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, block * 8, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(States * block));
    std::array<float*, States> values{};
    for (int k = 0; k < States; ++k) values[k] = scratch.data() + k * block;
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block, count = std::min(block, n - begin);
      for (int k = 0; k < States; ++k) {
        const float* code = code_table(k == 0);  // exp_avg / momentum signed, exp_avg_sq unsigned
        for (int64_t j = 0; j < count; ++j) values[k][j] = dequantize_state(code, codes[k][begin + j], absmax[k][b]);
      }
      update(begin, count, values);
      for (int k = 0; k < States; ++k) absmax[k][b] = quantize_block(values[k], count, k == 0, codes[k] + begin);
    }
  });
  for (int k = 0; k < States; ++k) {
    codes_of[k]->storage()->bump_version();
    absmax_of[k]->storage()->bump_version();
  }
}

// BF16 moments: widened into f32 scratch, updated, written back by
// stochastic rounding with eight Philox blocks (16 elements) at a time.
template <int States, typename UpdateRange>
void update_bf16_moments(const ParamSlot& s, float step, UpdateRange&& update) {
  const std::array<const Tensor*, 2> stored{&s.state1, &s.state2};
  std::array<uint16_t*, States> bits{};
  for (int k = 0; k < States; ++k) bits[k] = static_cast<uint16_t*>(stored[k]->data_ptr());
  parallel_for(s.param.numel(), 16, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(States * kScratch));
    std::array<float*, States> values{};
    for (int k = 0; k < States; ++k) values[k] = scratch.data() + k * kScratch;
    for (int64_t begin = first; begin < last; begin += kScratch) {
      const int64_t count = std::min(kScratch, last - begin);
      for (int k = 0; k < States; ++k) {
        for (int64_t j = 0; j < count; ++j) values[k][j] = bf16_bits_to_f32(bits[k][begin + j]);
      }
      update(begin, count, values);
      uint32_t words[4][8];
      for (int64_t i = begin; i < begin + count; ++i) {
        const int64_t group = i & ~int64_t{15};  // elements group .. group + 15 use blocks group / 2 .. + 7
        if (i == begin || i == group) philox4x32_10_x8(s.rounding_key, state_rounding_block(step, group), words);
        const auto j = static_cast<size_t>((i - group) / 2), w = static_cast<size_t>(2 * (i % 2));
        for (int k = 0; k < States; ++k) {
          bits[k][i] = f32_to_bf16_stochastic(values[k][i - begin], words[w + static_cast<size_t>(k)][j]);
        }
      }
    }
  });
  for (int k = 0; k < States; ++k) stored[k]->storage()->bump_version();
}

// The moments of one slot as f32 values the update can change, whatever
// their storage format: update(begin, count, moments) runs over ranges of
// elements, moments[k][j] holding element begin + j's value of state k
// (States: 1 for SGD's momentum, 2 for AdamW's exp_avg and exp_avg_sq); a
// range is contiguous f32 memory, so the update loop vectorises.
template <int States, typename UpdateRange>
void update_moments(const ParamSlot& s, float step, UpdateRange&& update) {
  if (s.state_format == StateFormat::Int8Blockwise) return update_int8_moments<States>(s, update);
  if (s.state_format == StateFormat::Bf16Stochastic) return update_bf16_moments<States>(s, step, update);
  const std::array<const Tensor*, 2> stored{&s.state1, &s.state2};
  std::vector<Updatable<float>> plain;
  plain.reserve(States);
  std::array<float*, States> values{};
  for (int k = 0; k < States; ++k) values[k] = plain.emplace_back(*stored[k]).data();
  parallel_for(s.param.numel(), 8, [&](int64_t begin, int64_t end) {
    std::array<float*, States> range{};
    for (int k = 0; k < States; ++k) range[k] = values[k] + begin;
    update(begin, end - begin, range);
  });
  for (auto& p : plain) p.commit();
}

}  // namespace

uint8_t nearest_state_code(bool is_signed, float x) {
  return nearest_code_by_table(code_table(is_signed), lookup_table(is_signed), x);
}

void adamw_step(const std::vector<ParamSlot>& slots, const AdamWArgs& scheduled_args, const AmpControl& amp,
                const StochasticRounding& rounding) {
  if (skipped(amp)) return;  // the device-side skip: nothing, not even the step count, changes
  AdamWArgs args = scheduled_args;
  args.lr *= lr_factor_of(amp);
  const float inv_scale = inv_scale_of(amp);
  for (const ParamSlot& s : slots) {
    const float step = advance_step(s);
    const AdamWStepConstants k = adamw_step_constants(step, args);
    Updatable<float> w(weights_of(s));
    Loaded<float> g(s.grad);
    float* pw = w.data();
    const float* pg = g.data();
    update_moments<2>(s, step, [&](int64_t begin, int64_t count, const std::array<float*, 2>& moments) {
      adamw_range(pw + begin, moments[0], moments[1], pg + begin, count, inv_scale, k, args);
    });
    write_back(s, w, rounding, step);
  }
}

void sgd_step(const std::vector<ParamSlot>& slots, const SgdArgs& scheduled_args, const AmpControl& amp,
              const StochasticRounding& rounding) {
  if (skipped(amp)) return;
  SgdArgs args = scheduled_args;
  args.lr *= lr_factor_of(amp);
  const float inv_scale = inv_scale_of(amp);
  for (const ParamSlot& s : slots) {
    const float step = advance_step(s);
    const bool first = step == 1.0f;
    Updatable<float> w(weights_of(s));
    Loaded<float> g(s.grad);
    float* pw = w.data();
    if (s.state1.defined()) {
      const float* pg = g.data();
      update_moments<1>(s, step, [&](int64_t begin, int64_t count, const std::array<float*, 1>& momentum) {
        sgd_range(pw + begin, momentum[0], pg + begin, count, inv_scale, first, args);
      });
    } else {
      float unused = 0;
      for (int64_t i = 0; i < g.size(); ++i) sgd_update(pw[i], unused, g[i] * inv_scale, first, args);
    }
    write_back(s, w, rounding, step);
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
  std::vector<float> scratch(static_cast<size_t>(block));
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t count = std::min(block, n - b * block);
    std::copy(in + b * block, in + b * block + count, scratch.begin());
    scale[b] = quantize_block(scratch.data(), count, is_signed, out + b * block);
  }
  codes.storage()->bump_version();
  absmax.storage()->bump_version();
}

}  // namespace mt::kernels::cpu
