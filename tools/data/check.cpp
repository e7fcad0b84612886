#include "tools/data/check.h"

#include <cmath>
#include <type_traits>

#include "runtime/error.h"

namespace mt::data {
namespace {

void note(std::vector<int64_t>& first, int64_t index) {
  if (first.size() < DataCheck::kFirstIndices) first.push_back(index);
}

// Per sample: its non-finite values, and whether every value is the same.
template <typename T>
void scan_inputs(const T* values, int64_t samples, int64_t per_sample, DataCheck& check) {
  for (int64_t s = 0; s < samples; ++s) {
    const T* x = values + s * per_sample;
    int64_t nonfinite = 0;
    bool constant = per_sample > 0;
    for (int64_t i = 0; i < per_sample; ++i) {
      if constexpr (std::is_floating_point_v<T>) nonfinite += std::isfinite(x[i]) ? 0 : 1;
      constant = constant && x[i] == x[0];
    }
    check.nonfinite_values += nonfinite;
    if (nonfinite > 0) {
      ++check.nonfinite_samples;
      note(check.first_nonfinite, s);
    }
    if (constant || per_sample == 0) {
      ++check.empty_samples;
      note(check.first_empty, s);
    }
  }
}

}  // namespace

DataCheck check_dataset(const TensorDataset& d, int64_t ignore_index) {
  DataCheck check;
  check.samples = d.size();
  if (check.samples == 0) return check;
  MT_CHECK(d.inputs.device().is_cpu() && d.targets.device().is_cpu(), "check-data: the dataset must be on the CPU");
  const Tensor inputs = d.inputs.contiguous();
  const int64_t per_sample = inputs.numel() / check.samples;
  switch (inputs.dtype()) {
    case kF32: scan_inputs(inputs.data<float>(), check.samples, per_sample, check); break;
    case kF64: scan_inputs(inputs.data<double>(), check.samples, per_sample, check); break;
    case kI64: scan_inputs(inputs.data<int64_t>(), check.samples, per_sample, check); break;
    default: {
      const Tensor wide = inputs.to(kF32);
      scan_inputs(wide.data<float>(), check.samples, per_sample, check);
    }
  }
  const Tensor targets = d.targets.to(kI64).contiguous();
  const int64_t* t = targets.data<int64_t>();
  const int64_t per_target = targets.numel() / check.samples;
  for (int64_t s = 0; s < check.samples; ++s) {
    int64_t bad = 0;
    for (int64_t i = 0; i < per_target; ++i) {
      const int64_t v = t[s * per_target + i];
      bad += (v != ignore_index && (v < 0 || v >= d.classes)) ? 1 : 0;
    }
    check.bad_targets += bad;
    if (bad > 0) note(check.first_bad_targets, s);
  }
  return check;
}

std::string describe(const DataCheck& c, int64_t classes) {
  std::string text = fmt::format(
      "{} samples: {} non-finite values (in {} samples), {} targets outside 0..{}, {} empty "
      "samples",
      c.samples, c.nonfinite_values, c.nonfinite_samples, c.bad_targets, classes - 1, c.empty_samples);
  auto first = [&](const char* what, const std::vector<int64_t>& indices) {
    if (!indices.empty()) text += fmt::format("\n    first {}: samples {}", what, fmt::join(indices, ", "));
  };
  first("non-finite", c.first_nonfinite);
  first("bad targets", c.first_bad_targets);
  first("empty", c.first_empty);
  return text;
}

}  // namespace mt::data
