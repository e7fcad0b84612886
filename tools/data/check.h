// `mixtape check-data`: look at a dataset before training on it.
//
// One pass over a split counts what would make training go wrong in ways
// that look like numerical trouble later: non-finite input values (a NaN
// pixel becomes a NaN loss at step 1, under any precision), targets outside
// the classes or vocabulary (a cross-entropy error, or silent garbage in
// other frameworks), and empty samples (every input value the same: a blank
// image, a passage of padding only). Each kind keeps its first offending
// sample indices so they can be looked at.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/data/dataset.h"

namespace mt::data {

struct DataCheck {
  int64_t samples = 0;
  int64_t nonfinite_values = 0, nonfinite_samples = 0;
  int64_t bad_targets = 0;  // target values outside [0, classes), padding targets (ignore_index) excepted
  int64_t empty_samples = 0;
  std::vector<int64_t> first_nonfinite, first_bad_targets, first_empty;  // up to kFirstIndices each
  static constexpr size_t kFirstIndices = 10;
  bool clean() const { return nonfinite_samples == 0 && bad_targets == 0 && empty_samples == 0; }
};

// Scans `d` (on the CPU). Targets equal to `ignore_index` are not counted as bad.
DataCheck check_dataset(const TensorDataset& d, int64_t ignore_index = -100);

// "60000 samples: 0 non-finite values, 0 targets outside 0..9, 0 empty samples" and, per kind, the first indices.
std::string describe(const DataCheck& check, int64_t classes);

}  // namespace mt::data
