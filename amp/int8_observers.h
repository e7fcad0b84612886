// INT8 calibration observers: what range of a tensor's values (a layer's
// input, over a calibration set) its INT8 scale should cover.
//
// Post-training static quantization runs the float model over N calibration
// batches (under NoGradGuard) with an observer on each quantizable input, then
// turns each observer's range into a scale: symmetric INT8 maps [-a, a] to
// [-127, 127], scale = a / 127. Which a is the whole question (facts in
// ../shared/REFERENCES.md, "INT8 inference"):
//   MinMax               the largest |x| seen: no value clips, but one outlier
//                        spends the 255 levels on a range nobody uses
//                        (MobileNetV2: 78.0% -> 67.7% per-tensor min/max).
//   MovingAverageMinMax  PyTorch's: each batch's min and max folded in with
//                        weight c (0.01), the first batch taken whole.
//   Percentile           the 99.99th percentile of |x| (TensorRT's percentile
//                        calibrator): the rarest values clip.
//   Histogram + Entropy  TensorRT's default for CNNs: the threshold whose
//                        128-level quantization of the |x| histogram loses the
//                        least information (KL divergence), Migacz 2017.
//   Histogram + Mse      the threshold with the least expected squared error
//                        (clipping plus rounding), from the same histogram.
// The histogram observers keep 2048 bins of |x| over [0, top); when a batch
// exceeds top it doubles (merging bins in pairs, exact) until it fits, so
// observing batch by batch gives the histogram of all of them at once.
//
// Observers read each batch back to the host (calibration is not the
// training step; it runs once, before export). A batch with a NaN or inf is
// refused: one would poison the range of every later batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mt::amp::int8 {

// A symmetric clipping range: values are clipped to [-amax, amax].
struct Range {
  double amax = 0;
};

// scale = amax / 127 (1 for an all-zero range, so every value maps to 0 exactly).
double symmetric_scale(const Range& range);

class Observer {
 public:
  virtual ~Observer() = default;
  // Folds in one batch (any shape, any floating dtype, any device).
  virtual void observe(const Tensor& x) = 0;
  // The range chosen from every batch so far; an mt::Error before the first.
  virtual Range range() const = 0;
  virtual std::string name() const = 0;
  int64_t batches() const { return batches_; }

 protected:
  // The batch's values as f64 on the host; an mt::Error names a non-finite one.
  std::vector<double> host_values(const Tensor& x);
  void require_observed() const;
  int64_t batches_ = 0;
};

class MinMaxObserver : public Observer {
 public:
  void observe(const Tensor& x) override;
  Range range() const override;
  std::string name() const override { return "minmax"; }
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  double min_ = 0, max_ = 0;
};

// min <- min + c (batch_min - min) from the second batch on (likewise max).
class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(double averaging_constant = 0.01);
  void observe(const Tensor& x) override;
  Range range() const override;
  std::string name() const override { return "moving-average-minmax"; }
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  double constant_;
  double min_ = 0, max_ = 0;
};

// The |x| histogram the percentile, entropy and MSE choices read.
class AbsHistogram {
 public:
  static constexpr int kBins = 2048;
  void add(const std::vector<double>& values);
  double top() const { return top_; }  // the histogram covers [0, top)
  double bin_width() const { return top_ / kBins; }
  const std::vector<double>& counts() const { return counts_; }
  double total() const;

 private:
  double top_ = 0;
  std::vector<double> counts_ = std::vector<double>(kBins, 0.0);
};

class PercentileObserver : public Observer {
 public:
  explicit PercentileObserver(double percentile = 99.99);
  void observe(const Tensor& x) override;
  // The upper edge of the bin where the |x| count reaches the percentile.
  Range range() const override;
  std::string name() const override { return "percentile"; }

 private:
  double percentile_;
  AbsHistogram histogram_;
};

enum class HistogramMethod { Entropy, Mse };

class HistogramObserver : public Observer {
 public:
  explicit HistogramObserver(HistogramMethod method = HistogramMethod::Entropy);
  void observe(const Tensor& x) override;
  Range range() const override;
  std::string name() const override { return method_ == HistogramMethod::Entropy ? "entropy" : "mse"; }
  const AbsHistogram& histogram() const { return histogram_; }

 private:
  HistogramMethod method_;
  AbsHistogram histogram_;
};

// The threshold bin count (128 .. 2048) TensorRT's entropy calibration picks
// for `counts`: the clipped reference P (outliers folded into its last bin)
// against its 128-level quantization Q, min KL(P || Q). Exposed for tests.
int entropy_threshold_bins(const std::vector<double>& counts);
// The counts with the first bin (|x| near 0) replaced by the second's, as
// NVIDIA's entropy calibrator does before the KL search: the inputs after a
// ReLU are mostly exact zeros, and a spike that size dominates the
// divergence, pulling the threshold down until most non-zero values clip
// (measured before this: the cnn's INT8 accuracy 98.98% of fp32, the
// resnet's 90.9%). The entropy observer's range() searches these counts.
std::vector<double> without_zero_spike(std::vector<double> counts);
// The threshold bin count (1 .. 2048) with the least expected squared error
// of symmetric 127-level quantization clipped there (bin centres stand for
// their values). Exposed for tests.
int mse_threshold_bins(const std::vector<double>& counts, double bin_width);

// "minmax", "moving-average-minmax", "percentile", "entropy", "mse"; an
// mt::Error lists them when `name` is unknown.
std::unique_ptr<Observer> make_observer(const std::string& name);

// Per-output-channel symmetric scales of a weight [out, ...]: amax of each
// row / 127 (1 where a row is all zeros), f32 [out] on the host.
Tensor per_channel_symmetric_scales(const Tensor& weight);

}  // namespace mt::amp::int8
