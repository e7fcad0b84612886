// Delayed scaling (Transformer Engine's DelayedScaling) for one tensor: the
// scale this step quantizes with comes from the amax of the steps before it,
// so the tensor is read once (current scaling, fp8::quantize, reads it twice).
//
//   quantize(x)  q = fp8(x * scale); max |x| is folded into history[0]
//   update()     amax = max(history) (or history[0]: most_recent), scale =
//                format_max / amax * 2^-margin (kept when amax is 0 or not
//                finite), then the history rolls by one and history[0] = 0
//
// The history, scale and scale_inv live on the tensor's device and only
// kernels touch them: no host sync, capturable. In data parallel training,
// reduce newest_amax() with a max over the ranks before update(), so every
// rank quantizes with the same scale.
#pragma once

#include <cstdint>
#include <string>

#include "autograd/fp8.h"

namespace mt::amp {

enum class AmaxAlgo { Max, MostRecent };

struct DelayedScalingOptions {
  int64_t history_len = 1024;  // Transformer Engine's default; 16-32 adapt faster
  AmaxAlgo algo = AmaxAlgo::Max;
  int margin = 0;
};

class DelayedScaling {
 public:
  DelayedScaling(fp8::Format format, DelayedScalingOptions options, Device device);

  fp8::Fp8Tensor quantize(const Tensor& x, bool with_transpose = false);
  void update();
  // Checkpoints: the history and scale (scale_inv follows from it). load()
  // refuses (mt::Error naming `what`) a history of another length, a
  // negative or NaN amax (+inf records an overflow and is kept), and a scale
  // that is not positive and finite.
  void load(const Tensor& amax_history, const Tensor& scale, const std::string& what);

  const Tensor& amax_history() const { return history_; }  // f32 [history_len]
  Tensor newest_amax() const { return history_.narrow(0, 0, 1); }  // a view of history[0]
  const Tensor& scale() const { return scale_; }            // f32 []
  const Tensor& scale_inv() const { return scale_inv_; }    // f32 []
  fp8::Format format() const { return format_; }
  const DelayedScalingOptions& options() const { return options_; }

 private:
  fp8::Format format_;
  DelayedScalingOptions options_;
  Tensor history_, scale_, scale_inv_;
};

}  // namespace mt::amp
