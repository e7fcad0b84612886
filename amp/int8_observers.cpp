#include "amp/int8_observers.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"

namespace mt::amp::int8 {

namespace {

constexpr int kQuantizedBins = 128;  // symmetric INT8: 127 levels above zero, and zero's own

// A distribution (not normalised) as probabilities, zeros lifted to eps and
// the mass taken from the non-zeros (MXNet's _smooth_distribution): KL needs
// q > 0 wherever p > 0.
std::vector<double> smoothed(std::vector<double> p) {
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v /= total;
  constexpr double kEps = 1e-4;
  const auto zeros = static_cast<double>(std::count(p.begin(), p.end(), 0.0));
  const double nonzeros = static_cast<double>(p.size()) - zeros;
  if (zeros == 0 || nonzeros == 0) return p;
  const double taken = kEps * zeros / nonzeros;
  for (double& v : p) v = v == 0 ? kEps : v - taken;
  return p;
}

double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) kl += p[i] * std::log(p[i] / q[i]);
  }
  return kl;
}

}  // namespace

double symmetric_scale(const Range& range) { return range.amax > 0 ? range.amax / 127.0 : 1.0; }

std::vector<double> Observer::host_values(const Tensor& x) {
  const NoGradGuard no_grad;
  MT_CHECK(is_floating(x.dtype()), "{} observer: expected floating values, got {}", name(), x.dtype());
  std::vector<double> values = x.detach().to(kCPU).contiguous().to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    MT_CHECK(std::isfinite(values[i]),
             "{} observer: calibration batch {} holds a non-finite value ({} at element {}); refusing it before it "
             "poisons the range",
             name(), batches_ + 1, values[i], i);
  }
  ++batches_;
  return values;
}

void Observer::require_observed() const {
  MT_CHECK(batches_ > 0, "{} observer: no calibration batch observed yet", name());
}

// ---------------------------------------------------------------- min/max

void MinMaxObserver::observe(const Tensor& x) {
  const std::vector<double> v = host_values(x);
  if (v.empty()) return;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  min_ = batches_ == 1 ? *lo : std::min(min_, *lo);
  max_ = batches_ == 1 ? *hi : std::max(max_, *hi);
}

Range MinMaxObserver::range() const {
  require_observed();
  return {std::max(std::abs(min_), std::abs(max_))};
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(double averaging_constant) : constant_(averaging_constant) {
  MT_CHECK(averaging_constant > 0 && averaging_constant <= 1,
           "moving-average-minmax observer: the averaging constant must be in (0, 1], got {}", averaging_constant);
}

void MovingAverageMinMaxObserver::observe(const Tensor& x) {
  const std::vector<double> v = host_values(x);
  if (v.empty()) return;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  if (batches_ == 1) {
    min_ = *lo;
    max_ = *hi;
  } else {
    min_ += constant_ * (*lo - min_);
    max_ += constant_ * (*hi - max_);
  }
}

Range MovingAverageMinMaxObserver::range() const {
  require_observed();
  return {std::max(std::abs(min_), std::abs(max_))};
}

// ---------------------------------------------------------------- the |x| histogram

void AbsHistogram::add(const std::vector<double>& values) {
  double batch_max = 0;
  for (double v : values) batch_max = std::max(batch_max, std::abs(v));
  if (top_ == 0) top_ = batch_max;
  while (batch_max > top_) {  // double the range: bins merge in pairs, exactly
    for (int i = 0; i < kBins / 2; ++i) counts_[i] = counts_[2 * i] + counts_[2 * i + 1];
    std::fill(counts_.begin() + kBins / 2, counts_.end(), 0.0);
    top_ *= 2;
  }
  for (double v : values) {
    const double a = std::abs(v);
    const int bin = top_ > 0 ? std::min(kBins - 1, static_cast<int>(a / top_ * kBins)) : 0;
    counts_[static_cast<size_t>(bin)] += 1;
  }
}

double AbsHistogram::total() const { return std::accumulate(counts_.begin(), counts_.end(), 0.0); }

PercentileObserver::PercentileObserver(double percentile) : percentile_(percentile) {
  MT_CHECK(percentile > 0 && percentile <= 100, "percentile observer: the percentile must be in (0, 100], got {}",
           percentile);
}

void PercentileObserver::observe(const Tensor& x) { histogram_.add(host_values(x)); }

Range PercentileObserver::range() const {
  require_observed();
  const std::vector<double>& counts = histogram_.counts();
  const double wanted = histogram_.total() * percentile_ / 100.0;
  double seen = 0;
  for (int b = 0; b < AbsHistogram::kBins; ++b) {
    seen += counts[static_cast<size_t>(b)];
    if (seen >= wanted) return {(b + 1) * histogram_.bin_width()};
  }
  return {histogram_.top()};
}

// ---------------------------------------------------------------- entropy and MSE thresholds

int entropy_threshold_bins(const std::vector<double>& counts) {
  const int bins = static_cast<int>(counts.size());
  MT_CHECK(bins >= kQuantizedBins, "entropy calibration: needs at least {} bins, got {}", kQuantizedBins, bins);
  int best = bins;
  double best_kl = INFINITY;
  for (int i = kQuantizedBins; i <= bins; ++i) {
    const std::vector<double> sliced(counts.begin(), counts.begin() + i);
    if (std::accumulate(sliced.begin(), sliced.end(), 0.0) == 0) continue;
    // P: the first i bins, everything above folded into the last one.
    std::vector<double> p = sliced;
    p.back() += std::accumulate(counts.begin() + i, counts.end(), 0.0);
    // Q: those i bins merged into 128 levels, each level's count spread back
    // evenly over its non-empty bins.
    const int merged = i / kQuantizedBins;
    std::vector<double> q(static_cast<size_t>(i), 0.0);
    for (int level = 0; level < kQuantizedBins; ++level) {
      const int begin = level * merged, end = level == kQuantizedBins - 1 ? i : begin + merged;
      double sum = 0, nonempty = 0;
      for (int b = begin; b < end; ++b) {
        sum += sliced[static_cast<size_t>(b)];
        nonempty += sliced[static_cast<size_t>(b)] != 0 ? 1 : 0;
      }
      if (nonempty == 0) continue;
      for (int b = begin; b < end; ++b) {
        if (sliced[static_cast<size_t>(b)] != 0) q[static_cast<size_t>(b)] = sum / nonempty;
      }
    }
    const double kl = kl_divergence(smoothed(p), smoothed(q));
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return best;
}

int mse_threshold_bins(const std::vector<double>& counts, double bin_width) {
  const int bins = static_cast<int>(counts.size());
  int best = bins;
  double best_error = INFINITY;
  for (int t = 1; t <= bins; ++t) {
    const double amax = t * bin_width, scale = amax / 127.0;
    double error = 0;
    for (int b = 0; b < bins; ++b) {
      if (counts[static_cast<size_t>(b)] == 0) continue;
      const double centre = (b + 0.5) * bin_width;
      const double level = std::min(127.0, std::nearbyint(centre / scale));
      const double diff = centre - level * scale;
      error += counts[static_cast<size_t>(b)] * diff * diff;
    }
    if (error < best_error) {
      best_error = error;
      best = t;
    }
  }
  return best;
}

HistogramObserver::HistogramObserver(HistogramMethod method) : method_(method) {}

void HistogramObserver::observe(const Tensor& x) { histogram_.add(host_values(x)); }

std::vector<double> without_zero_spike(std::vector<double> counts) {
  if (counts.size() >= 2) counts[0] = counts[1];
  return counts;
}

Range HistogramObserver::range() const {
  require_observed();
  if (histogram_.top() == 0) return {0.0};
  const int bins = method_ == HistogramMethod::Entropy
                       ? entropy_threshold_bins(without_zero_spike(histogram_.counts()))
                       : mse_threshold_bins(histogram_.counts(), histogram_.bin_width());
  return {bins * histogram_.bin_width()};
}

// ---------------------------------------------------------------- by name; weights

std::unique_ptr<Observer> make_observer(const std::string& name) {
  if (name == "minmax") return std::make_unique<MinMaxObserver>();
  if (name == "moving-average-minmax") return std::make_unique<MovingAverageMinMaxObserver>();
  if (name == "percentile") return std::make_unique<PercentileObserver>();
  if (name == "entropy") return std::make_unique<HistogramObserver>(HistogramMethod::Entropy);
  if (name == "mse") return std::make_unique<HistogramObserver>(HistogramMethod::Mse);
  fail("unknown observer '{}': known observers are minmax, moving-average-minmax, percentile, entropy, mse", name);
}

Tensor per_channel_symmetric_scales(const Tensor& weight) {
  MT_CHECK(weight.dim() >= 1 && weight.size(0) > 0, "per-channel scales: expected a weight [out, ...], got {}",
           weight.shape_string());
  const NoGradGuard no_grad;
  const int64_t rows = weight.size(0), per_row = weight.numel() / rows;
  const std::vector<double> v = weight.detach().to(kCPU).contiguous().to_vector();
  std::vector<double> scales(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int64_t i = 0; i < per_row; ++i) amax = std::max(amax, std::abs(v[static_cast<size_t>(r * per_row + i)]));
    MT_CHECK(std::isfinite(amax), "per-channel scales: row {} of the weight {} is not finite", r,
             weight.shape_string());
    scales[static_cast<size_t>(r)] = symmetric_scale({amax});
  }
  return from_vector(scales, {rows}, kF32);
}

}  // namespace mt::amp::int8
