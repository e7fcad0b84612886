// The two 256-entry dynamic codes of 8-bit optimizer state (state_format.h).
#include "kernels/optim/state_format.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mt::kernels {
namespace {

// Decades 0..6 of [0.1, 1] x 10^(d - 6), n_d = 2^(d + extra_bits) interval centres each.
std::vector<double> decade_centres(int extra_bits) {
  std::vector<double> values;
  for (int d = 0; d < 7; ++d) {
    const double n = std::ldexp(1.0, d + extra_bits);
    const double decade = std::pow(10.0, d - 6);
    for (int j = 0; j < static_cast<int>(n); ++j) values.push_back(decade * (0.1 + (j + 0.5) * 0.9 / n));
  }
  return values;
}

std::array<float, kCodeEntries> make_code(bool is_signed) {
  std::vector<double> values = decade_centres(is_signed ? 0 : 1);
  if (is_signed) {
    const size_t positives = values.size();
    for (size_t k = 0; k < positives; ++k) values.push_back(-values[k]);
  }
  values.push_back(0.0);
  values.push_back(1.0);
  std::sort(values.begin(), values.end());
  std::array<float, kCodeEntries> code{};
  for (size_t k = 0; k < code.size(); ++k) code[k] = static_cast<float>(values.at(k));
  return code;
}

}  // namespace

const std::array<float, 2 * kCodeEntries>& dynamic_codes() {
  static const std::array<float, 2 * kCodeEntries> table = [] {
    std::array<float, 2 * kCodeEntries> both{};
    const auto s = make_code(true), u = make_code(false);
    std::copy(s.begin(), s.end(), both.begin());
    std::copy(u.begin(), u.end(), both.begin() + kCodeEntries);
    return both;
  }();
  return table;
}

}  // namespace mt::kernels
