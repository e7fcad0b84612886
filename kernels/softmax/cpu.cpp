// CPU softmax and log_softmax over the last dim, one row per item of work.
// f64 rows run the shared formulas of kernels/softmax/math.h as written;
// f32 rows (f16/bf16 load as f32) run the same formulas with exp computed
// eight at a time (kernels/common/vector_math.h): libm's scalar expf was
// the largest single cost of a bf16 gpt-small step after the GEMMs.
#include "kernels/softmax/cpu.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"
#include "kernels/softmax/math.h"

namespace mt::kernels::cpu {
namespace {

// softmax_row of math.h for f32: the max (a NaN wins), the shifted logits,
// their exp in one vector pass, the sum in order, one 1/sum or log(sum).
void softmax_row_f32(const float* row, float* out, int64_t n, bool log) {
  if (n == 0) return;
  float max = row[0];
  for (int64_t i = 1; i < n; ++i) max = (row[i] > max || row[i] != row[i]) ? row[i] : max;
  for (int64_t i = 0; i < n; ++i) out[i] = row[i] - max;
  float* e = log ? thread_f32_scratch(n) : out;
  exp_n(out, e, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += e[i];
  if (log) {
    const float log_sum = std::log(sum);
    for (int64_t i = 0; i < n; ++i) out[i] -= log_sum;
  } else {
    const float inv_sum = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) out[i] *= inv_sum;
  }
}

// softmax_backward_row of math.h for f32; log_softmax's exp(y) in one vector pass.
void softmax_backward_row_f32(const float* dy, const float* y, float* dx, int64_t n, bool log) {
  float dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += softmax_backward_dot_term(dy[i], y[i], log);
  if (!log) {
    for (int64_t i = 0; i < n; ++i) dx[i] = softmax_backward_from_dot(dy[i], y[i], dot, false);
    return;
  }
  float* e = thread_f32_scratch(n);
  exp_n(y, e, n);
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] - e[i] * dot;
}

template <typename T>
void softmax_row_any(const T* row, T* out, int64_t n, bool log) {
  if constexpr (std::is_same_v<T, float>) {
    softmax_row_f32(row, out, n, log);
  } else {
    softmax_row(row, out, n, log);
  }
}

template <typename T>
void softmax_backward_row_any(const T* dy, const T* y, T* dx, int64_t n, bool log) {
  if constexpr (std::is_same_v<T, float>) {
    softmax_backward_row_f32(dy, y, dx, n, log);
  } else {
    softmax_backward_row(dy, y, dx, n, log);
  }
}

template <typename T>
void forward_typed(const Tensor& in, const Tensor& out, bool log) {
  const int64_t cols = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t rows = cols == 0 ? 0 : in.numel() / cols;
  Loaded<T> x(in);
  OutputBuffer<T> y(out);  // out itself when it is contiguous T: no zeroed scratch, no copy after
  parallel_for(rows, 4 * cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) softmax_row_any(x.data() + r * cols, y.data() + r * cols, cols, log);
  });
  y.commit();
}

template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  const int64_t cols = out.dim() == 0 ? 1 : out.size(-1);
  const int64_t rows = cols == 0 ? 0 : out.numel() / cols;
  Loaded<T> dy(grad_out), y(out);
  OutputBuffer<T> dx(grad_in);
  parallel_for(rows, 4 * cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      softmax_backward_row_any(dy.data() + r * cols, y.data() + r * cols, dx.data() + r * cols, cols, log);
    }
  });
  dx.commit();
}

}  // namespace

void softmax_forward(const Tensor& in, const Tensor& out, bool log) {
  if (in.dtype() == kF64) {
    forward_typed<double>(in, out, log);
  } else {
    forward_typed<float>(in, out, log);
  }
}

void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  if (grad_in.dtype() == kF64) {
    backward_typed<double>(grad_out, out, grad_in, log);
  } else {
    backward_typed<float>(grad_out, out, grad_in, log);
  }
}

}  // namespace mt::kernels::cpu
