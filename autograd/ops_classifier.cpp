// linear_cross_entropy: the vocabulary head and its loss as one op, computed
// a chunk of rows at a time so the [N, V] logits never exist whole.
//
// For a GPT-2-sized head (V = 50257) at 16 x 1024 tokens the unfused pair
// keeps 3.3 GB of f32 logits for cross-entropy's backward (under autocast the
// loss runs in f32, so the f16 logits are also widened and kept) plus the
// f16 logits themselves. Here forward keeps only each row's softmax
// statistics (max, log-sum-exp) and backward recomputes a chunk's logits
// (one more head GEMM), turns them into their gradient with the same kernel
// cross_entropy's backward uses, and feeds the two head GEMMs.
//
// Numerics follow the unfused pair exactly where they can: the logits are
// the linear's (same GEMM, same dtype), the loss statistics are computed in
// f32 from them (as autocast's f32 cross_entropy does), the logits' gradient
// is formed in f32 with the upstream gradient (the loss scale) applied
// before it is rounded to the GEMM dtype, and grad hidden is one GEMM per
// chunk over the whole vocabulary. The one difference: grad weight sums the
// chunks' products in f32, so each chunk's partial sum is rounded to the
// GEMM dtype once (f16/bf16 only; a single chunk is the unfused result).
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/dtype_report.h"
#include "autograd/fp8.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "kernels/cross_entropy/cross_entropy.h"

namespace mt {
namespace {

// Rows per chunk: logits of about 16M elements (64 MB in f32) at a time.
int64_t default_chunk_rows(int64_t classes) {
  constexpr int64_t kChunkElements = int64_t{1} << 24;
  return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, classes));
}

void check_inputs(const Tensor& hidden, const Tensor& weight, const Tensor& target, const CrossEntropyOptions& options,
                  int64_t chunk_rows) {
  autograd::check_floating("linear_cross_entropy", hidden);
  autograd::check_index_tensor("linear_cross_entropy", target);
  autograd::check_same_device("linear_cross_entropy", hidden, weight);
  autograd::check_same_device("linear_cross_entropy", hidden, target);
  MT_CHECK(hidden.dim() == 2 && weight.dim() == 2 && weight.size(1) == hidden.size(1),
           "linear_cross_entropy: expected hidden [N, C] and weight [V, C], got {} and {}", hidden.shape_string(),
           weight.shape_string());
  MT_CHECK(weight.size(0) > 0, "linear_cross_entropy: weight {} has no classes", weight.shape_string());
  MT_CHECK(target.dim() == 1 && target.size(0) == hidden.size(0),
           "linear_cross_entropy: target shape {} does not match hidden {} (expected [{}] class indices)",
           target.shape_string(), hidden.shape_string(), hidden.size(0));
  MT_CHECK(options.reduction != Reduction::None,
           "linear_cross_entropy: reduction none is not fused (per-row gradients differ); use linear + cross_entropy");
  MT_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
           "linear_cross_entropy: label_smoothing must be in [0, 1], got {}", options.label_smoothing);
  MT_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0 (0 picks one), got {}", chunk_rows);
}

// The logits of hidden rows [start, start + rows), widened to the loss dtype
// as autocast's f32 cross_entropy would widen the linear's output.
Tensor chunk_logits(const Tensor& hidden, const Tensor& weight, int64_t start, int64_t rows, DType loss_dtype) {
  return linear(hidden.narrow(0, start, rows), weight).to(loss_dtype);
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden_in, const Tensor& weight_in, const Tensor& target,
                            const CrossEntropyOptions& options, int64_t chunk_rows) {
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::LinearCrossEntropy, {hidden_in, weight_in});
  const Tensor &hidden = in[0], &weight = in[1];
  check_inputs(hidden, weight, target, options, chunk_rows);
  const int64_t n = hidden.size(0), classes = weight.size(0);
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(classes);
  const DType loss_dtype = hidden.dtype() == kF64 ? kF64 : kF32;
  const kernels::CrossEntropyArgs args{options.ignore_index, options.label_smoothing};

  Tensor row_stats = empty({n, 2}, loss_dtype, hidden.device());  // max, log sum exp(x - max)
  Tensor out, counted;
  {
    NoGradGuard no_grad;
    const amp::Autocast inside(hidden.device(), amp::autocast_dtype(hidden.device()), /*enabled=*/false);
    // The head stays out of FP8 (as Transformer Engine keeps it), here and
    // where backward recomputes these logits: both must agree.
    const fp8::NoRegionGuard no_fp8;
    const Tensor row_loss = empty({n}, loss_dtype, hidden.device());
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t rows = std::min(chunk, n - start);
      kernels::cross_entropy_forward(chunk_logits(hidden, weight, start, rows, loss_dtype),
                                     target.narrow(0, start, rows), row_loss.narrow(0, start, rows),
                                     row_stats.narrow(0, start, rows), args);
    }
    out = sum(row_loss);
    if (options.reduction == Reduction::Mean) {
      counted = sum(ne(target, static_cast<double>(options.ignore_index)).to(loss_dtype));
      out = div(out, counted);
    }
  }
  if (!autograd::needs_grad({hidden, weight})) return out;
  const bool in_fp8_region = fp8::active_region() != nullptr;
  // saves: hidden, weight (compute dtype), target, stats (f32 max, lse per row),
  // count (mean only, on the device): O(N + V) beyond the inputs, not O(N V)
  const Tensor loss = autograd::record(
      in, out,
      [sh = autograd::save(hidden), sw = autograd::save(weight), st = autograd::save(target),
       ss = autograd::save(row_stats), sc = autograd::save(counted), args, chunk, loss_dtype,
       mean = options.reduction == Reduction::Mean](const Tensor& g) -> std::vector<Tensor> {
        NoGradGuard no_grad;
        const fp8::NoRegionGuard no_fp8;  // a backward run inside the region too
        const Tensor hidden_ = sh.get(), weight_ = sw.get(), target_ = st.get(), stats = ss.get();
        const int64_t n_ = hidden_.size(0);
        const Tensor total = g.reshape({1}).to(loss_dtype);
        const Tensor per_row = mean ? div(total, sc.get()) : total;
        Tensor grad_hidden = empty(hidden_.sizes(), hidden_.dtype(), hidden_.device());
        Tensor grad_weight;  // summed over chunks in f32 (f64 for f64)
        for (int64_t start = 0; start < n_; start += chunk) {
          const int64_t rows = std::min(chunk, n_ - start);
          const Tensor logits = chunk_logits(hidden_, weight_, start, rows, loss_dtype);
          Tensor grad_logits = empty(logits.sizes(), loss_dtype, logits.device());
          kernels::cross_entropy_backward(logits, target_.narrow(0, start, rows), stats.narrow(0, start, rows),
                                          per_row.expand({rows}), grad_logits, args);
          grad_logits = grad_logits.to(hidden_.dtype());
          copy_(grad_hidden.narrow(0, start, rows), matmul(grad_logits, weight_));
          const Tensor partial = matmul(grad_logits.transpose(0, 1), hidden_.narrow(0, start, rows)).to(loss_dtype);
          grad_weight = grad_weight.defined() ? add(grad_weight, partial) : partial;
        }
        if (!grad_weight.defined()) grad_weight = zeros(weight_.sizes(), loss_dtype, weight_.device());
        return {grad_hidden, grad_weight.to(weight_.dtype())};
      });
  if (autograd::DtypeRecorder* recorder = autograd::active_dtype_recorder(); recorder != nullptr && in_fp8_region) {
    recorder->note_not_fp8(loss, "the fused vocabulary head and its loss stay in high precision, as TE keeps the head");
  }
  return loss;
}

}  // namespace mt
