// Cross-entropy with label smoothing over C classes: the formulas are in
// kernels/cross_entropy/math.h (shared with cuda.cu); the row's statistics
// (max, log_sum), saved [N, 2] for backward, come from kernels/softmax/math.h.
// Rows whose target is ignore_index contribute 0 loss and 0 gradient.
#include "kernels/cross_entropy/cpu.h"

#include "kernels/cross_entropy/math.h"
#include "kernels/softmax/math.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void forward_typed(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& row_stats_out,
                   CrossEntropyArgs args) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Loaded<T> x(logits);
  Loaded<int64_t> t(target);
  std::vector<T> vloss(static_cast<size_t>(n)), vstats(static_cast<size_t>(2 * n));
  const T eps = static_cast<T>(args.label_smoothing);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t label = t[r];
    const T* row = x.data() + r * c;
    const RowStats<T> stats = row_stats<T>(row, c);
    const T log_sum = std::log(stats.sum);
    vstats[static_cast<size_t>(2 * r)] = stats.max;
    vstats[static_cast<size_t>(2 * r + 1)] = log_sum;
    if (label == args.ignore_index) {
      vloss[static_cast<size_t>(r)] = 0;
      continue;
    }
    MT_CHECK(label >= 0 && label < c, "cross_entropy: target {} at row {} is out of range for {} classes", label, r, c);
    T value = cross_entropy_target_loss(row[label] - stats.max, log_sum, eps);
    if (eps != T(0)) {
      T sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += log_sum - (row[k] - stats.max);
      value += cross_entropy_smoothing_loss(sum, eps, static_cast<T>(c));
    }
    vloss[static_cast<size_t>(r)] = value;
  }
  store(vloss.data(), loss);
  store(vstats.data(), row_stats_out);
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
      for (int64_t k = 0; k < c; ++k) {
        const T q = cross_entropy_target_probability(k == label, eps, static_cast<T>(c));
        drow[k] = cross_entropy_logit_grad(g[r], x[r * c + k] - stats[2 * r], stats[2 * r + 1], q);
      }
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
