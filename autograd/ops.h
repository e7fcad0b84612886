// The differentiable op API. Each op checks its inputs, decides its compute
// dtype, runs the kernel for the inputs' device and, when an input takes part
// in autograd, records a tape node with its backward rule.
//
// Where to find an op: forward and backward of each family sit together in
// autograd/ops_<family>.cpp; the kernels, CPU and CUDA, with their shared
// per-element math, in kernels/<family>/ (kernels/README.md).
#pragma once

#include <functional>

#include <optional>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace mt {

// ---------------------------------------------------------------- elementwise (ops_elementwise.cpp)
// Binary ops broadcast and promote dtypes like PyTorch (f16 with bf16 gives f32; a 0-dim
// operand widens the result only from a lower category: f32[4] + f64[] is f32, i64[4] + f32[] f32).
// As in PyTorch, a 0-dim tensor operand is cast to that result dtype before the op: f16[4] +
// f32[] rounds the f32 value to f16 first (the comparisons too). The scalar forms below do not.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Scalar forms keep the tensor's dtype; the scalar itself is applied in the
// compute type (f32/f64), never rounded to f16 first. (PyTorch 1.13 rounds it
// to the tensor's dtype: bf16 -0.1 + 0.1 is 0 there and -9.8e-5 here, the
// correctly rounded sum; tests/parity lists it.)
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(const Tensor& a, double b);  // b - a

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

enum class GeluApproximation { None, Tanh };  // erf form (exact) or the tanh approximation
// Activations keep a NaN (relu(NaN) is NaN, and its gradient passes), as PyTorch.
// GELU is computed as x * Phi(x) with Phi = erfc(-x/sqrt 2) / 2 (tanh form: x * sigmoid(2u)), which
// does not cancel for negative x as 1 + erf does: more precise than PyTorch 1.13's CPU kernels.
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::None);
Tensor silu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);

// Comparisons return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Elementwise AND of two bool tensors (broadcasting).
Tensor logical_and(const Tensor& a, const Tensor& b);

// ---------------------------------------------------------------- reductions (ops_reduce.cpp)
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// Variance with `correction` (1 = unbiased, Bessel's correction; 0 = population).
Tensor var(const Tensor& x, const Shape& dims, double correction = 1, bool keepdim = false);
Tensor var(const Tensor& x);  // over all elements, unbiased
// One integer dim, as PyTorch's sum(x, -1, true); braces stay a list of dims
// (sum(x, {}) is every dim).
template <typename I, IfDim<I> = 0>
Tensor sum(const Tensor& x, I dim, bool keepdim = false) {
  return sum(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, IfDim<I> = 0>
Tensor mean(const Tensor& x, I dim, bool keepdim = false) {
  return mean(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <typename I, IfDim<I> = 0>
Tensor var(const Tensor& x, I dim, double correction = 1, bool keepdim = false) {
  return var(x, Shape{static_cast<int64_t>(dim)}, correction, keepdim);
}
// Running sum along `dim` (torch.cumsum), accumulated in f32 (f64 for f64);
// integer and bool inputs give i64, as PyTorch's.
Tensor cumsum(const Tensor& x, int64_t dim);
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// The whole tensor's max/min; the gradient is spread evenly over every element equal to the
// result (every NaN when it is NaN), as PyTorch's. max(x, dim)'s goes to the index it returns.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
// Sums `x` down to `shape` over broadcast dims (the backward of broadcasting).
Tensor sum_to_size(const Tensor& x, const Shape& shape);

// ---------------------------------------------------------------- linear algebra (ops_linalg.cpp)
// matmul follows torch.matmul: 1-D vectors, 2-D matrices, and batched N-D with
// broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// a [n] x b [m] -> [n, m] (torch.outer): a broadcast product, exact in every dtype.
Tensor outer(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// y = act(x @ weight^T + bias), weight [out, in], x [..., in]: one GEMM with
// the bias and the activation in its epilogue (rounded once). Saves x and
// weight for backward, plus y for a fused ReLU (its mask) or the
// pre-activation for a fused GELU (its derivative's input): what PyTorch's
// Linear followed by relu / gelu keeps. Gelu is the erf form, GeluTanh
// gelu(approximate="tanh").
enum class LinearActivation { None, Relu, Gelu, GeluTanh };
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              LinearActivation activation = LinearActivation::None);
// A mixture-of-experts router's logits x @ weight^T (weight [experts, in]),
// always in f32: under BF16/FP16 autocast and inside an FP8 region alike
// (Switch Transformer's selective precision: the softmax over experts and the
// top-k choice are too sensitive for a lower-precision GEMM's rounding).
Tensor router_logits(const Tensor& x, const Tensor& weight);

// ---------------------------------------------------------------- attention (ops_attention.cpp)
// softmax(q k^T * scale + mask) v on q [..., T_q, D], k [..., T_k, D], v [..., T_k, D_v]
// (typically [B, H, T, D]), as PyTorch 2's F.scaled_dot_product_attention:
//   attn_mask: bool (true = the query may attend to that key) or floating (added to the
//              scores), broadcastable to [..., T_q, T_k];
//   key_padding_mask: bool [B, T_k], true = a padding key nobody attends to (nn.MultiheadAttention's);
//   is_causal: query i attends to keys j <= i (top-left aligned when T_q != T_k); not with attn_mask;
//   dropout_p: dropout on the attention weights (applied whenever > 0, as PyTorch does);
//   scale: default 1 / sqrt(D);
//   enable_gqa: grouped-query attention (PyTorch 2.5's flag): k and v may have fewer heads
//               (dim -3) than q, dividing them; query head h reads K/V head h / (H_q / H_kv).
//               The fused kernels read the K/V heads as they are (no repeated copies) and sum
//               their gradients over each group; the reference path repeats them.
// A query row with every key masked gives NaN, as PyTorch's math path does. Autocast runs it in
// lower precision; inside, softmax keeps its statistics in f32. This is the reference path,
// composed of matmul, softmax and dropout (differentiable through them).
struct AttentionOptions {
  Tensor attn_mask;
  Tensor key_padding_mask;
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale;
  Generator* generator = nullptr;
  bool enable_gqa = false;
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// ---------------------------------------------------------------- neural-network functions (ops_nn.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

enum class Reduction { None, Mean, Sum };
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::Mean;
};
// logits [N, C] (or [C]), target i64 class indices [N] (or []). Returns f32 (f64 for f64 logits),
// also for f16/bf16 logits, where PyTorch returns the logits' dtype: an accepted difference of
// tests/parity (the loss is a statistic; rounding it to bf16 costs 3 digits for nothing).
// Softmax statistics are formed from x - max, so a shared offset of 1e4 costs no precision.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// The vocabulary head and its loss in one op (ops_classifier.cpp):
// cross_entropy(linear(hidden, weight), target, options) for hidden [N, C] and
// weight [V, C], computed `chunk_rows` rows at a time (0: about 16M logits per
// chunk), so the [N, V] logits never exist whole: forward keeps each row's
// softmax statistics, backward recomputes each chunk's logits. Mean and sum
// reductions only. Autocast: the GEMMs in lower precision, the loss in f32.
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& target,
                            const CrossEntropyOptions& options = {}, int64_t chunk_rows = 0);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// x / sqrt(mean(x^2 over the trailing normalized_shape) + eps) * weight (nn::RMSNorm's op). The
// statistic is computed in f32 (f64 for f64) whatever x's dtype; eps defaults to x's dtype's machine
// epsilon, as PyTorch's; the result has the promoted dtype of x and weight. Autocast: f32.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// Rotary position embeddings (RoPE), fused: x [..., T, D] (D even) rotated
// by position, y = x * cos + rotate_half(x) * sin, pairing element i with
// i + D/2 (HF Llama's rotate_half); cos and sin [T, D], each angle repeated
// over the two halves (models/llama.h's rope_tables). Computed in f32 (f64
// for f64), rounded once to x's dtype; the tables get no gradient.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
// silu(gate) * up (Llama's SwiGLU MLP activation), fused: one kernel forward,
// one for both gradients; gate and up of one shape. Autocast: promote.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// weight [V, D], indices i64 of any shape -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

// ---------------------------------------------------------------- shape and indexing (ops_shape.cpp)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with src's slices added at `index` along dim (torch.index_add): src has
// x's shape but index.numel() in dim. Repeated indices sum in index order
// (deterministic on every device); the gradient to src gathers (index_select).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---------------------------------------------------------------- sorting and sampling (ops_sort.cpp)
// The k largest (or smallest) values along `dim` and their indices, largest
// first (smallest first when !largest); equal values keep their index order
// and NaN counts as larger than every number, as PyTorch's sort. The values'
// gradient flows back to the indices they came from.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// num_samples indices per row of `weights` ([n] or [rows, n]: non-negative,
// finite, not all zero; they need not sum to 1), drawn with probability
// proportional to the weight (torch.multinomial). Without replacement the
// draws are distinct, as sequential draws renormalising the rest would be.
// Reads the weights' validity back to the host (one sync).
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

// In-place writes (not recorded): dst = src (broadcast, cast), dst = value.
// Writing into a leaf that requires grad is only allowed under NoGradGuard.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);
// The broadcast shape of two shapes, or an mt::Error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// ---------------------------------------------------------------- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return mul(reciprocal(b), a); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

// ---------------------------------------------------------------- convolution and pooling (ops_conv.cpp)
// NCHW layout, as PyTorch. A (height, width) pair; one number means both: conv2d(x, w, b, 2, 1).
struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor): conv2d(x, w, b, 2)
  constexpr Size2(int64_t height, int64_t width) : h(height), w(width) {}
};

// x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] (optional) -> [N, O, OH, OW] with
// OH = (H + 2*padding.h - dilation.h*(KH-1) - 1) / stride.h + 1. Runs in f16/bf16 under autocast.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = 1, Size2 padding = 0,
              Size2 dilation = 1, int64_t groups = 1);
// Pooling over the last two dims of [N, C, H, W] (or [C, H, W]); padding is at most kernel/2.
// max_pool2d's gradient goes to each window's maximum (the first one on ties); padding never wins.
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0);
// count_include_pad: divide by the window size including padded positions (PyTorch's default).
Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0, bool count_include_pad = true);
// Output cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
// x [N, C, ...]; running_mean / running_var [C] (f32 buffers, may be undefined in training),
// weight / bias [C] (optional). Training normalises with the batch mean and biased variance and
// updates the running buffers in place (not recorded): running = (1 - momentum) * running +
// momentum * batch statistic, with the unbiased variance. Eval normalises with the running
// statistics. Statistics are f32 (f64 for f64 input). Under autocast nothing is cast: f16/bf16
// activations with f32 weight, bias and running statistics give an output in the input's dtype
// (as PyTorch's CUDA kernels do; its CPU kernel refuses the mix, see tests/parity).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = true,
                  double momentum = 0.1, double eps = 1e-5);
// Training-mode batch_norm over the batch of every rank of a data-parallel
// job (PyTorch's SyncBatchNorm): all_reduce_sum(t) must sum t (a contiguous
// f32 tensor, f64 for f64 input) in place over the ranks. Per channel, each
// rank's count, mean and sum of squared deviations are combined by Chan's
// formula (two all-reduces, f32 whatever the input dtype: a rank's large mean
// does not cancel, f16 sums cannot overflow); backward all-reduces the two
// per-channel sums of dy and dy * x_hat once. The running statistics are
// updated with the global ones, identically on every rank. With a callback
// that does nothing it is batch_norm on this rank's batch.
using AllReduceSum = std::function<void(const Tensor&)>;
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, double momentum, double eps, const AllReduceSum& all_reduce_sum);

}  // namespace mt
