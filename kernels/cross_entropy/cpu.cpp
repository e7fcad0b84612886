// Cross-entropy with label smoothing over C classes: the formulas are in
// kernels/cross_entropy/math.h (shared with cuda.cu); the row's statistics
// (max, log_sum), saved [N, 2] for backward, come from kernels/softmax/math.h.
// Rows whose target is ignore_index contribute 0 loss and 0 gradient. f64
// rows run those formulas as written; f32 rows (f16/bf16 load as f32) the
// same ones with exp eight at a time (kernels/common/vector_math.h).
#include "kernels/cross_entropy/cpu.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"
#include "kernels/cross_entropy/math.h"
#include "kernels/softmax/math.h"

namespace mt::kernels::cpu {
namespace {

// row_stats of softmax/math.h for an f32 row with the exps eight at a time
// (exp_n): the max (a NaN wins), the shifted logits' exps, their sum in
// order. libm's scalar expf here and in the backward, on one thread, was
// 16% of a bf16 gpt-tiny step (perf).
RowStats<float> row_stats_f32(const float* row, int64_t n) {
  float max = row[0];
  for (int64_t i = 1; i < n; ++i) max = (row[i] > max || row[i] != row[i]) ? row[i] : max;
  float* e = thread_f32_scratch(n);
  for (int64_t i = 0; i < n; ++i) e[i] = row[i] - max;
  exp_n(e, e, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += e[i];
  return {max, sum};
}

template <typename T>
RowStats<T> stats_of(const T* row, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return row_stats_f32(row, n);
  } else {
    return row_stats<T>(row, n);
  }
}

// Rows are independent and each is computed the same way wherever it falls,
// so the rows run in parallel with any thread count giving the same bits;
// the targets are checked first (an error cannot leave a parallel region).
template <typename T>
void forward_typed(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& row_stats_out,
                   CrossEntropyArgs args) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Loaded<T> x(logits);
  Loaded<int64_t> t(target);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t label = t[r];
    MT_CHECK(label == args.ignore_index || (label >= 0 && label < c),
             "cross_entropy: target {} at row {} is out of range for {} classes", label, r, c);
  }
  std::vector<T> vloss(static_cast<size_t>(n)), vstats(static_cast<size_t>(2 * n));
  const T eps = static_cast<T>(args.label_smoothing);
  parallel_for(n, 4 * c, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t label = t[r];
      const T* row = x.data() + r * c;
      const RowStats<T> stats = stats_of(row, c);
      const T log_sum = std::log(stats.sum);
      vstats[static_cast<size_t>(2 * r)] = stats.max;
      vstats[static_cast<size_t>(2 * r + 1)] = log_sum;
      if (label == args.ignore_index) {
        vloss[static_cast<size_t>(r)] = 0;
        continue;
      }
      T value = cross_entropy_target_loss(row[label] - stats.max, log_sum, eps);
      if (eps != T(0)) {
        T sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += log_sum - (row[k] - stats.max);
        value += cross_entropy_smoothing_loss(sum, eps, static_cast<T>(c));
      }
      vloss[static_cast<size_t>(r)] = value;
    }
  });
  store(vloss.data(), loss);
  store(vstats.data(), row_stats_out);
}

// One row's dloss/dx: cross_entropy_logit_grad of math.h, for f32 with the
// exps of (x - max) - log_sum eight at a time.
template <typename T>
void logit_grad_row(const T* row, T grad, T max, T log_sum, int64_t label, T eps, int64_t c, T* drow) {
  if constexpr (std::is_same_v<T, float>) {
    float* e = thread_f32_scratch(c);
    for (int64_t k = 0; k < c; ++k) e[k] = (row[k] - max) - log_sum;
    exp_n(e, e, c);
    for (int64_t k = 0; k < c; ++k) {
      drow[k] = grad * (e[k] - cross_entropy_target_probability(k == label, eps, static_cast<T>(c)));
    }
  } else {
    for (int64_t k = 0; k < c; ++k) {
      const T q = cross_entropy_target_probability(k == label, eps, static_cast<T>(c));
      drow[k] = cross_entropy_logit_grad(grad, row[k] - max, log_sum, q);
    }
  }
}

template <typename T>
void backward_typed(const Tensor& logits, const Tensor& target, const Tensor& row_stats, const Tensor& grad_loss,
                    const Tensor& grad_logits, CrossEntropyArgs args) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Loaded<T> x(logits), stats(row_stats), g(grad_loss);
  Loaded<int64_t> t(target);
  std::vector<T> dx(static_cast<size_t>(n * c));
  const T eps = static_cast<T>(args.label_smoothing);
  parallel_for(n, 4 * c, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* drow = dx.data() + r * c;
      const int64_t label = t[r];
      if (label == args.ignore_index) {
        std::fill(drow, drow + c, T(0));
        continue;
      }
      logit_grad_row(x.data() + r * c, g[r], stats[2 * r], stats[2 * r + 1], label, eps, c, drow);
    }
  });
  store(dx.data(), grad_logits);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& row_stats,
                           CrossEntropyArgs args) {
  if (logits.dtype() == kF64) {
    forward_typed<double>(logits, target, loss, row_stats, args);
  } else {
    forward_typed<float>(logits, target, loss, row_stats, args);
  }
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& row_stats,
                            const Tensor& grad_loss, const Tensor& grad_logits, CrossEntropyArgs args) {
  if (logits.dtype() == kF64) {
    backward_typed<double>(logits, target, row_stats, grad_loss, grad_logits, args);
  } else {
    backward_typed<float>(logits, target, row_stats, grad_loss, grad_logits, args);
  }
}

}  // namespace mt::kernels::cpu
