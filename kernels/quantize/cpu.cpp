// The quantize family's CPU back end: one pass over contiguous data, the
// per-element formulas of math.h (the ones the CUDA kernels run), split
// across threads. Bound by memory bandwidth: the loops are plain enough for
// the compiler to vectorise the division and rounding.
#include "kernels/quantize/cpu.h"

#include <algorithm>
#include <cstdint>

#include "kernels/common/strided.h"
#include "kernels/quantize/math.h"

namespace mt::kernels::cpu {
namespace {

// Elements [begin, end) of one channel's run, its scale and zero point
// hoisted: a loop the compiler vectorises (vdivps, vroundps, min/max).
template <typename Q>
void quantize_run(const float* x, int64_t begin, int64_t end, float scale, int32_t zero_point, int32_t lo, int32_t hi,
                  Q* q) {
  for (int64_t i = begin; i < end; ++i) q[i] = static_cast<Q>(quantize_value(x[i], scale, zero_point, lo, hi));
}

// Channels along the last axis (SmoothQuant's per-input-channel scales):
// rows of `channels` elements, each column its own scale, read in order.
template <typename Q>
void quantize_rows(const float* x, int64_t n, const float* scales, const int32_t* zero_points, int64_t channels,
                   int32_t lo, int32_t hi, Q* q) {
  parallel_for(n / channels, channels, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const float* row = x + r * channels;
      Q* out = q + r * channels;
      for (int64_t j = 0; j < channels; ++j) {
        out[j] = static_cast<Q>(quantize_value(row[j], scales[j], zero_points[j], lo, hi));
      }
    }
  });
}

// The tensor as runs of `inner` elements that share a channel.
template <typename Q>
void quantize_into(const float* x, int64_t n, const float* scales, const int32_t* zero_points, QuantizeAxis axis,
                   DType format, Q* q) {
  const int32_t lo = quantized_min(format), hi = quantized_max(format);
  if (axis.inner == 1 && axis.channels > 1) return quantize_rows(x, n, scales, zero_points, axis.channels, lo, hi, q);
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t run_end = std::min(end, (i / axis.inner + 1) * axis.inner);
      const int64_t c = axis.channel(i);
      quantize_run(x, i, run_end, scales[c], zero_points[c], lo, hi, q);
      i = run_end;
    }
  });
}

template <typename Q>
void dequantize_into(const Q* q, int64_t n, const float* scales, const int32_t* zero_points, QuantizeAxis axis,
                     float* out) {
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t c = axis.channel(i);
      out[i] = dequantize_value(static_cast<int32_t>(q[i]), scales[c], zero_points[c]);
    }
  });
}

}  // namespace

void int8_quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                   const Tensor& out) {
  const Loaded<float> values(x);
  const float* s = scales.data<float>();
  const int32_t* z = zero_points.data<int32_t>();
  if (out.dtype() == kU8) {
    quantize_into(values.data(), values.size(), s, z, axis, kU8, static_cast<uint8_t*>(out.data_ptr()));
  } else {
    quantize_into(values.data(), values.size(), s, z, axis, kI8, static_cast<int8_t*>(out.data_ptr()));
  }
  out.storage()->bump_version();
}

Int8Output::Int8Output(const Tensor& out, float scale, int32_t zero_point)
    : out_(out), scale_(scale), zero_point_(zero_point) {
  if (out.dtype() != kU8) {
    buffer_.emplace(out);  // out itself when it is f32
    values_ = buffer_->data();
  }
}

float* Int8Output::values() {
  if (values_ == nullptr) {  // a u8 out's
    scratch_ = HostScratch<float>(out_.numel());
    values_ = scratch_.get();
  }
  return values_;
}

void Int8Output::finish(int64_t begin, int64_t n) {
  if (buffer_) return;
  store(begin, values_ + begin, n);
}

void Int8Output::store(int64_t begin, const float* values, int64_t n) {
  if (buffer_) {
    std::copy(values, values + n, values_ + begin);
    return;
  }
  quantize_run(values, 0, n, scale_, zero_point_, quantized_min(kU8), quantized_max(kU8),
               static_cast<uint8_t*>(out_.data_ptr()) + begin);
}

void Int8Output::commit() {
  if (buffer_) {
    buffer_->commit();
  } else {
    out_.storage()->bump_version();
  }
}

void int8_dequantize(const Tensor& q, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                     const Tensor& out) {
  OutputBuffer<float> values(out);
  const float* s = scales.data<float>();
  const int32_t* z = zero_points.data<int32_t>();
  if (q.dtype() == kU8) {
    dequantize_into(static_cast<const uint8_t*>(q.data_ptr()), q.numel(), s, z, axis, values.data());
  } else {
    dequantize_into(static_cast<const int8_t*>(q.data_ptr()), q.numel(), s, z, axis, values.data());
  }
  values.commit();
}

}  // namespace mt::kernels::cpu
