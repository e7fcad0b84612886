// Sorting and sampling: topk, sort, argsort (kernels/sort/) and multinomial.
//
// The kernels find indices only; the values are gather(x, dim, indices), so
// their gradient is gather's (a scatter-add of g back to where each value
// came from), which is what PyTorch's topk and sort backward compute.
#include <limits>
#include <optional>

#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "core/generator.h"
#include "kernels/sort/sort.h"

namespace mt {

namespace {

// The indices of the first k values (all of them without k) of each row
// along `dim` in sorted order, in x's layout (k along `dim`).
Tensor sorted_indices(const Tensor& x, std::optional<int64_t> first_k, int64_t dim, bool descending, const char* op) {
  const autograd::RowsAlongDim along = autograd::rows_along_dim(x, dim, op);
  const int64_t n = along.rows.size(1), k = first_k.value_or(n);
  MT_CHECK(k >= 0 && k <= n, "{}: k = {} is out of range for a dim of size {}", op, k, n);
  Tensor indices = empty({along.rows.size(0), k}, kI64, x.device());
  kernels::sort_rows(along.rows, indices, k, descending);
  return along.restore(indices);
}

ValuesIndices with_values(const Tensor& x, int64_t dim, Tensor indices) {
  ValuesIndices r;
  r.values = x.dim() == 0 ? x.reshape({1}).reshape({}) : gather(x, dim, indices);
  r.indices = std::move(indices);
  return r;
}

}  // namespace

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  return with_values(x, dim, sorted_indices(x, k, dim, largest, "topk"));
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  return with_values(x, dim, sorted_indices(x, std::nullopt, dim, descending, "sort"));
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  return sorted_indices(x, std::nullopt, dim, descending, "argsort");
}

namespace {

// One host read for every check multinomial makes: the smallest weight, the
// largest, the smallest row sum and the fewest positive weights in a row.
void check_sampling_weights(const Tensor& w, int64_t num_samples, bool replacement) {
  const Tensor row_sums = sum(w, -1), positive = sum(gt(w, 0.0), -1);
  const std::vector<double> v =
      stack({min(w), max(w), min(row_sums), min(positive).to(w.dtype())}).to(kCPU).to_vector();
  MT_CHECK(v[0] >= 0 && v[1] < std::numeric_limits<double>::infinity(),
           "multinomial: weights must be finite and non-negative (smallest {}, largest {})", v[0], v[1]);
  MT_CHECK(v[2] > 0, "multinomial: a row of weights sums to {}; every row needs a positive weight", v[2]);
  MT_CHECK(replacement || v[3] >= static_cast<double>(num_samples),
           "multinomial: {} samples without replacement, but a row has only {} positive weights", num_samples, v[3]);
}

}  // namespace

// The Gumbel-max trick: with u uniform in (0, 1), argmax_i (log w_i - log(-log u_i))
// is category i with probability w_i / sum(w), and the k largest keys are k
// draws without replacement, in the order sequential draws would make them
// (Vieira, "Gumbel-max trick and weighted reservoir sampling"). Each sample
// with replacement gets its own row of keys.
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator* generator) {
  MT_CHECK(weights.dim() == 1 || weights.dim() == 2, "multinomial: weights must be 1-D or 2-D, got {}",
           weights.shape_string());
  MT_CHECK(is_floating(weights.dtype()), "multinomial: weights must be floating point, got {}", weights.dtype());
  const int64_t n = weights.size(-1);
  MT_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got {}", num_samples);
  MT_CHECK(replacement || num_samples <= n, "multinomial: {} samples without replacement from {} categories",
           num_samples, n);
  const NoGradGuard no_grad;
  const DType compute = weights.dtype() == kF64 ? kF64 : kF32;
  const Tensor w = (weights.dim() == 1 ? weights.unsqueeze(0) : weights).detach().to(compute);
  check_sampling_weights(w, num_samples, replacement);
  const int64_t rows = w.size(0);
  const bool one_row_of_keys = !replacement || num_samples == 1;
  const Shape key_shape = one_row_of_keys ? Shape{rows, n} : Shape{rows, num_samples, n};
  // u in [tiny, 1): u = 0 would make a key of -inf that could never win.
  const Tensor u = clamp(rand(key_shape, compute, w.device(), generator), std::numeric_limits<float>::min(), 1.0);
  const Tensor gumbel = neg(log(neg(log(u))));
  Tensor samples;
  if (one_row_of_keys) {
    samples = topk(add(log(w), gumbel), num_samples, -1).indices;
  } else {
    samples = argmax(add(log(w).unsqueeze(1), gumbel), -1);
  }
  return weights.dim() == 1 ? samples.squeeze(0) : samples;
}

}  // namespace mt
