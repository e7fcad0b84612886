#include "kernels/fp8/cpu.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/fp8/math.h"

namespace mt::kernels::cpu {

namespace {

// max |x| over [begin, end) as ordered bits (NaN wins, as on the device).
uint32_t amax_bits(const float* x, int64_t begin, int64_t end) {
  uint32_t m = 0;
  for (int64_t i = begin; i < end; ++i) m = std::max(m, fp8_abs_bits(x[i]));
  return m;
}

// Each thread's range, then a max of the ranges' maxima: a max is the same
// in any order, so the result does not depend on the thread count.
uint32_t parallel_amax_bits(const float* x, int64_t n) {
  std::atomic<uint32_t> result{0};
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    const uint32_t mine = amax_bits(x, begin, end);
    uint32_t seen = result.load();
    while (mine > seen && !result.compare_exchange_weak(seen, mine)) {
    }
  });
  return result.load();
}

void fold_amax(const Tensor& amax, uint32_t bits) {
  float& a = *amax.data<float>();
  a = bits_float(std::max(fp8_abs_bits(a), bits));
  amax.storage()->bump_version();
}

}  // namespace

void fp8_amax(const Tensor& x, const Tensor& amax) {
  Loaded<float> values(x);
  fold_amax(amax, parallel_amax_bits(values.data(), values.size()));
}

void fp8_delayed_update(const Tensor& history, bool most_recent, Fp8ScaleRule rule, const Tensor& scale,
                        const Tensor& scale_inv) {
  fp8_delayed_step(history.data<float>(), history.numel(), most_recent, rule, scale.data<float>(),
                   scale_inv.data<float>());
  for (const Tensor* t : {&history, &scale, &scale_inv}) t->storage()->bump_version();
}

void fp8_quantize_with_scale(const Tensor& x, const Tensor& scale, const Tensor& out, const Tensor& out_t,
                             const Tensor& amax) {
  Loaded<float> values(x);
  const float s = *scale.data<float>();
  auto* q = static_cast<uint8_t*>(out.data_ptr());
  const DType format = out.dtype();
  parallel_for(values.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) q[i] = fp8_quantize_value(values[i], s, format);
  });
  out.storage()->bump_version();
  if (out_t.defined()) {  // x [rows, cols] -> out_t [cols, rows]
    const int64_t rows = x.size(0), cols = x.size(1);
    auto* qt = static_cast<uint8_t*>(out_t.data_ptr());
    parallel_for(cols, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        for (int64_t r = 0; r < rows; ++r) qt[c * rows + r] = q[r * cols + c];
      }
    });
    out_t.storage()->bump_version();
  }
  if (amax.defined()) fold_amax(amax, parallel_amax_bits(values.data(), values.size()));
}

void fp8_scale_from_amax(const Tensor& amax, Fp8ScaleRule rule, const Tensor& scale, const Tensor& scale_inv) {
  const float s = fp8_current_scale(*amax.data<float>(), rule);
  *scale.data<float>() = s;
  *scale_inv.data<float>() = 1.0f / s;
  for (const Tensor* t : {&scale, &scale_inv}) t->storage()->bump_version();
}

void fp8_quantize_grouped(const Tensor& x, Fp8Groups groups, Fp8ScaleRule rule, const Tensor& out,
                          const Tensor& scale_inv) {
  Loaded<float> values(x);
  auto* q = static_cast<uint8_t*>(out.data_ptr());
  float* inv = scale_inv.data<float>();
  const DType format = out.dtype();
  const int64_t per_group = groups.group_rows * std::min(groups.group_cols, groups.cols);
  parallel_for(groups.count(), per_group, [&](int64_t first, int64_t last) {
    for (int64_t g = first; g < last; ++g) {
      const int64_t row0 = (g / groups.group_columns()) * groups.group_rows;
      const int64_t col0 = (g % groups.group_columns()) * groups.group_cols;
      const int64_t row_end = std::min(groups.rows, row0 + groups.group_rows);
      const int64_t width = std::min(groups.cols - col0, groups.group_cols);  // ragged at the edges
      uint32_t bits = 0;
      for (int64_t r = row0; r < row_end; ++r) {
        bits = std::max(bits, amax_bits(values.data(), r * groups.cols + col0, r * groups.cols + col0 + width));
      }
      const float scale = fp8_current_scale(bits_float(bits), rule);
      inv[g] = 1.0f / scale;
      for (int64_t r = row0; r < row_end; ++r) {
        for (int64_t i = r * groups.cols + col0; i < r * groups.cols + col0 + width; ++i) {
          q[i] = fp8_quantize_value(values[i], scale, format);
        }
      }
    }
  });
  out.storage()->bump_version();
  scale_inv.storage()->bump_version();
}

void fp8_count_saturated_and_flushed(const Tensor& q, const Tensor& x, const Tensor& scale_inv, Fp8Groups groups,
                                     const Tensor& counts) {
  const auto* bytes = static_cast<const uint8_t*>(q.data_ptr());
  const float* inv = scale_inv.data<float>();
  Loaded<float> values(x);
  int64_t saturated = 0, flushed = 0;
  for (int64_t i = 0; i < q.numel(); ++i) {
    saturated +=
        fp8_saturated(values[i], inv[fp8_group_of(groups, i / groups.cols, i % groups.cols)], q.dtype()) ? 1 : 0;
    flushed += fp8_flushed(bytes[i], values[i]) ? 1 : 0;
  }
  float* c = counts.data<float>();
  c[0] += static_cast<float>(saturated);
  c[1] += static_cast<float>(flushed);
  counts.storage()->bump_version();
}

void fp8_dequantize(const Tensor& q, const Tensor& scale_inv, Fp8Groups groups, const Tensor& out) {
  const auto* bytes = static_cast<const uint8_t*>(q.data_ptr());
  const float* inv = scale_inv.data<float>();
  const DType format = q.dtype();
  std::vector<float> values(static_cast<size_t>(q.numel()));
  parallel_for(groups.rows, groups.cols, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      for (int64_t c = 0; c < groups.cols; ++c) {
        const int64_t i = r * groups.cols + c;
        values[static_cast<size_t>(i)] = fp8_dequantize_value(bytes[i], inv[fp8_group_of(groups, r, c)], format);
      }
    }
  });
  store(values.data(), out);
}

void fp8_gemm_combine(const Tensor& product, int64_t k_group, const Tensor& a_scale_inv, Fp8Groups a_groups,
                      const Tensor& b_scale_inv, Fp8Groups b_groups, const Tensor& bias, const Tensor& out) {
  const int64_t k_groups = product.size(0), m_rows = out.size(0), n_cols = out.size(1);
  const float* p = product.data<float>();
  const float* a_inv = a_scale_inv.data<float>();
  const float* b_inv = b_scale_inv.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  std::vector<float> values(static_cast<size_t>(out.numel()));
  parallel_for(m_rows, n_cols * k_groups, [&](int64_t first, int64_t last) {
    for (int64_t m = first; m < last; ++m) {
      for (int64_t n = 0; n < n_cols; ++n) {
        const int64_t i = m * n_cols + n;
        float v = fp8_combine_element(p + i, out.numel(), k_groups, k_group, a_inv, a_groups, m, b_inv, b_groups, n);
        if (b != nullptr) v += b[n];
        values[static_cast<size_t>(i)] = v;
      }
    }
  });
  store(values.data(), out);
}

}  // namespace mt::kernels::cpu
