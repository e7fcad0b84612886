// Cross-entropy with label smoothing eps over C classes:
//   q = (1 - eps) * onehot(target) + eps / C
//   loss_row = -sum_c q_c * log_softmax(x)_c = lse - sum_c q_c * x_c
//   dloss/dx_c = softmax(x)_c - q_c
// Rows whose target is ignore_index contribute 0 loss and 0 gradient.
#include "kernels/cross_entropy.h"

#include "kernels/common/softmax.h"
#include "kernels/cpu/strided.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void forward_typed(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& lse,
                   CrossEntropyArgs args) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Loaded<T> x(logits);
  Loaded<int64_t> t(target);
  std::vector<T> vloss(static_cast<size_t>(n)), vlse(static_cast<size_t>(n));
  const T eps = static_cast<T>(args.label_smoothing);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t label = t[r];
    const T* row = x.data() + r * c;
    const T row_lse = softmax_row<T>(row, nullptr, c, false);
    vlse[static_cast<size_t>(r)] = row_lse;
    if (label == args.ignore_index) {
      vloss[static_cast<size_t>(r)] = 0;
      continue;
    }
    MT_CHECK(label >= 0 && label < c, "cross_entropy: target {} at row {} is out of range for {} classes", label, r,
             c);
    T value = (T(1) - eps) * (row_lse - row[label]);
    if (eps != T(0)) {
      T sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += row_lse - row[k];
      value += eps / static_cast<T>(c) * sum;
    }
    vloss[static_cast<size_t>(r)] = value;
  }
  store(vloss.data(), loss);
  store(vlse.data(), lse);
}

template <typename T>
void backward_typed(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& grad_loss,
                    const Tensor& grad_logits, CrossEntropyArgs args) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Loaded<T> x(logits), vlse(lse), g(grad_loss);
  Loaded<int64_t> t(target);
  std::vector<T> dx(static_cast<size_t>(n * c));
  const T eps = static_cast<T>(args.label_smoothing);
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* drow = dx.data() + r * c;
      const int64_t label = t[r];
      if (label == args.ignore_index) {
        std::fill(drow, drow + c, T(0));
        continue;
      }
      for (int64_t k = 0; k < c; ++k) {
        const T q = (k == label ? T(1) - eps : T(0)) + eps / static_cast<T>(c);
        drow[k] = g[r] * (std::exp(x[r * c + k] - vlse[r]) - q);
      }
    }
  });
  store(dx.data(), grad_logits);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& lse,
                           CrossEntropyArgs args) {
  if (logits.dtype() == kF64) {
    forward_typed<double>(logits, target, loss, lse, args);
  } else {
    forward_typed<float>(logits, target, loss, lse, args);
  }
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& grad_loss,
                            const Tensor& grad_logits, CrossEntropyArgs args) {
  if (logits.dtype() == kF64) {
    backward_typed<double>(logits, target, lse, grad_loss, grad_logits, args);
  } else {
    backward_typed<float>(logits, target, lse, grad_loss, grad_logits, args);
  }
}

}  // namespace mt::kernels::cpu
