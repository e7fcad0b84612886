// Fused attention on the CPU (flash-attention style), forward and backward.
//
// What: out = softmax(q k^T * scale + masks) v with each row's log-sum-exp
//   (lse), and grad_q, grad_k, grad_v from grad_out, for [B, H, T, D] f32,
//   f16 or bf16 tensors whose last dim is contiguous (the head split's
//   transposed views are read in place), with the causal, key-padding,
//   bool and float masks and the dropout of kernels/attention/math.h (the
//   CUDA/sim kernels' own rules, so the dropout mask is the same Philox mask).
// How: the reference path (matmul -> where -> softmax -> dropout -> matmul)
//   writes the [B, H, Tq, Tk] scores, probabilities and their gradients to
//   memory and reads them back in eight or so passes. Here they exist only a
//   tile at a time (kQueryTile x kKeyTile, 16 KiB of f32, in L1/L2):
//   - forward, one task per (head, query tile): for each key tile,
//     S = scale Q K^T (an Eigen GEMM on f32 tiles), the masks, then the
//     "online softmax": raise each row's running max m, rescale its sum l and
//     accumulator by exp(m_old - m_new), add exp(S - m) (SLEEF, eight at a
//     time) to l and exp(S - m) V to the accumulator; dropout multiplies the
//     accumulated weights only, never l. out = acc / l, lse = m + log l.
//   - backward, one task per K/V head (a group of query heads under
//     grouped-query attention, summed in order): delta_i = grad_out_i . out_i; for each key
//     tile, for each query tile at or below the causal diagonal, recompute
//     P = exp(S - lse), dP = dO V^T, dS = P (z dP - delta) (z: the dropout
//     factor), and accumulate dV += (z P)^T dO, dK += scale dS^T Q, and
//     dQ += dS K in f32 per head.
//   Only lse (4 bytes per query row) is saved beyond q, k, v and out, where
//   the reference path saves the T x T probabilities.
// Precision: f16/bf16 tiles widen exactly to f32; scores, statistics,
//   accumulators and gradients are f32; each output is rounded once. A row
//   with every key masked has l = 0: out is NaN (as the reference path and
//   PyTorch's math path) and lse -inf; backward gives it zero gradients.
// Determinism: every output element is summed by one task in a fixed order,
//   so results do not depend on the thread count.
// Speed (bench/cpu_attention_bench, bench/results/cpu_attention.md; 2-core
//   AMD EPYC with AVX512-BF16, causal, B=1 H=12 D=64, bf16 forward +
//   backward): 1.74x the reference path's tokens/s at T = 256, 1.98x at
//   1024, 4.40x at 4096, with 42 MiB of peak tensor memory against 1176 at
//   4096. Most of its time is Eigen's f32 tile products (perf, gpt-small
//   bf16 training: 8.9% of the step, against about 3% for the softmax and
//   backward bookkeeping); at T = 256 bf16 is no faster than f32 (each tile
//   is widened first).
#include "kernels/attention/cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "kernels/attention/math.h"
#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"
#include "runtime/error.h"
#include "runtime/half.h"

namespace mt::kernels::cpu {
namespace {

constexpr int64_t kQueryTile = 64;  // query rows per forward task and backward step
constexpr int64_t kKeyTile = 64;    // keys per score tile

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Matrix = Eigen::Map<RowMajor>;                                      // contiguous f32 scratch
using ConstMatrix = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;  // rows of an operand, as f32
constexpr float kMinusInf = -INFINITY;

// Per-thread f32 buffers, grown on first use and kept (tasks on one thread
// reuse them).
struct Scratch {
  std::vector<float> q, k, v, grad_out, scores, grad_scores, acc, grad_q, grad_k, grad_v;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

float* sized(std::vector<float>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// `rows` rows of `width` values, `stride` elements apart from `first` on, as
// an f32 matrix: the values themselves for f32, else widened (exactly) into
// `buffer`.
template <typename S>
ConstMatrix rows_as_f32(const S* first, int64_t rows, int64_t width, int64_t stride, std::vector<float>& buffer) {
  if constexpr (std::is_same_v<S, float>) {
    return ConstMatrix(first, rows, width, Eigen::OuterStride<>(stride));
  } else {
    float* out = sized(buffer, rows * width);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) out[r * width + c] = static_cast<float>(first[r * stride + c]);
    }
    return ConstMatrix(out, rows, width, Eigen::OuterStride<>(width));
  }
}

// dst[i] = src[i] * factor, rounded once to S.
template <typename S>
void store(const float* src, int64_t n, float factor, S* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = S(src[i] * factor);
}

// A [B, H, T, width] operand whose last dim is contiguous (the head split's
// views are read in place, with no copy): where row t of head bh starts.
template <typename S>
struct Rows {
  const S* data;
  int64_t heads, batch_stride, head_stride, row_stride, width;
  explicit Rows(const Tensor& t)
      : data(static_cast<const S*>(t.data_ptr())),
        heads(t.size(1)),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        row_stride(t.stride(2)),
        width(t.size(3)) {}
  const S* row(int64_t bh, int64_t t) const {
    return data + bh / heads * batch_stride + bh % heads * head_stride + t * row_stride;
  }
  // Rows [first, first + count) of head bh as an f32 matrix.
  ConstMatrix as_f32(int64_t bh, int64_t first, int64_t count, std::vector<float>& buffer) const {
    return rows_as_f32(row(bh, first), count, width, row_stride, buffer);
  }
};

// The operands of one call.
template <typename S>
struct Heads {
  const AttentionProblem& p;
  Rows<S> q, k, v;
};

// Applies the masks to a rows x cols tile of scaled scores (query i0 + r,
// key j0 + c): masked scores become -inf whatever the product was (a NaN or
// inf product of a masked key must not leak), float mask values are added.
// Causal and key-padding masks (what the models use) take a short way: a
// padded key is one column, the causal future a triangle.
void mask_scores(const AttentionProblem& p, int64_t bh, int64_t i0, int64_t j0, int64_t rows, int64_t cols,
                 float* scores) {
  if (p.keep_mask != nullptr || p.bias_mask != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float bias = attention::score_bias(p, bh, i0 + r, j0 + c);
        float& s = scores[r * cols + c];
        s = bias == kMinusInf ? kMinusInf : s + bias;
      }
    }
    return;
  }
  if (p.key_padding != nullptr) {
    const bool* padded = p.key_padding + bh / p.heads * p.k_len + j0;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = scores + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] = padded[c] ? kMinusInf : row[c];
    }
  }
  if (p.causal && j0 + cols - 1 > i0) {  // the tile reaches above the diagonal
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < cols; ++c) scores[r * cols + c] = kMinusInf;
    }
  }
}

// factors[c] = the dropout factor of (query i, key j0 + c): the Philox
// numbers of math.h's dropout_element (consecutive along a row), drawn
// eight blocks (32 numbers) at a time.
void dropout_factors(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j0, int64_t cols, float* factors) {
  const uint64_t first = attention::dropout_element(p, bh, i, j0);
  const float scale = p.dropout_scale;  // a local: factors could alias p's fields, which would reload per element
  uint64_t block = first / 4;
  int64_t word = static_cast<int64_t>(first % 4);  // where the row starts in its first block
  for (int64_t c = 0; c < cols; block += 8, word = 0) {
    uint32_t words[4][8];
    philox4x32_10_x8(p.dropout_seed, p.dropout_offset + block, words);
    float keep[32];  // attention::dropout_keep_factor's test, 32 at a time
    philox_keep_x32(words, p.dropout_p, keep);
    const int64_t n = std::min<int64_t>(32 - word, cols - c);
    for (int64_t k = 0; k < n; ++k) factors[c + k] = keep[word + k] * scale;
    c += n;
  }
}

// The largest score of a row, NaN ignored (as fmaxf, whose libm call
// would cost more than the comparison).
float row_max(const float* row, int64_t n) {
  float m = kMinusInf;
  for (int64_t c = 0; c < n; ++c) m = row[c] > m ? row[c] : m;
  return m;
}

// ---- forward ----------------------------------------------------------------

// The online-softmax state of one query tile: running max m, sum l and the
// unnormalised output acc (rows x value_dim), all f32.
struct RowState {
  float m[kQueryTile], l[kQueryTile];
  float* acc;
};

// Turns a rows x cols tile of masked scores into the weights exp(s - m_new)
// (times the dropout factor) that multiply V, updating each row's m, l and
// acc; a row with nothing kept in this tile gets zero weights.
void online_softmax_step(const AttentionProblem& p, int64_t bh, int64_t i0, int64_t j0, int64_t rows, int64_t cols,
                         float* scores, RowState& state) {
  const int64_t dv = p.value_dim;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * cols;
    const float tile_max = row_max(row, cols);
    if (tile_max == kMinusInf) {
      std::fill(row, row + cols, 0.0f);
      continue;
    }
    const float m_new = std::max(state.m[r], tile_max);
    const float correction = std::exp(state.m[r] - m_new);  // 0 on the row's first kept tile
    if (correction != 1.0f) {
      state.l[r] *= correction;
      for (int64_t c = 0; c < dv; ++c) state.acc[r * dv + c] *= correction;
    }
    for (int64_t c = 0; c < cols; ++c) row[c] -= m_new;
    exp_n(row, row, cols);
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += row[c];
    state.l[r] += sum;  // the softmax's own sum: before dropout
    if (p.dropout_p > 0.0f) {
      float factors[kKeyTile];
      dropout_factors(p, bh, i0 + r, j0, cols, factors);
      for (int64_t c = 0; c < cols; ++c) row[c] *= factors[c];
    }
    state.m[r] = m_new;
  }
}

template <typename S>
void forward_query_tile(const Heads<S>& in, int64_t bh, int64_t i0, S* out, float* lse) {
  const AttentionProblem& p = in.p;
  const int64_t rows = std::min(kQueryTile, p.q_len - i0), dv = p.value_dim;
  Scratch& s = scratch();
  const ConstMatrix q = in.q.as_f32(bh, i0, rows, s.q);
  RowState state;
  std::fill(state.m, state.m + rows, kMinusInf);
  std::fill(state.l, state.l + rows, 0.0f);
  state.acc = sized(s.acc, rows * dv);
  std::fill(state.acc, state.acc + rows * dv, 0.0f);
  Matrix acc(state.acc, rows, dv);
  float* scores = sized(s.scores, kQueryTile * kKeyTile);
  const int64_t keys = attention::key_end(p, i0, rows);
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, keys - j0);
    const int64_t kvbh = attention::kv_head(p, bh);  // grouped-query: the K/V head this query head reads
    const ConstMatrix k = in.k.as_f32(kvbh, j0, cols, s.k);
    const ConstMatrix v = in.v.as_f32(kvbh, j0, cols, s.v);
    Matrix tile(scores, rows, cols);
    tile.noalias() = p.scale * (q * k.transpose());
    mask_scores(p, bh, i0, j0, rows, cols, scores);
    online_softmax_step(p, bh, i0, j0, rows, cols, scores, state);
    acc.noalias() += tile * v;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float l = state.l[r];
    // 1 / 0 = inf for a fully masked row: 0 * inf makes its output NaN.
    store(state.acc + r * dv, dv, 1.0f / l, out + (bh * p.q_len + i0 + r) * dv);
    lse[bh * p.q_len + i0 + r] = l > 0.0f ? state.m[r] + std::log(l) : kMinusInf;
  }
}

template <typename S>
void forward_typed(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, S* out, float* lse) {
  const Heads<S> in{p, Rows<S>(q), Rows<S>(k), Rows<S>(v)};
  const int64_t tiles = (p.q_len + kQueryTile - 1) / kQueryTile, heads = p.batch * p.heads;
  const int64_t work = kQueryTile * p.k_len * (p.head_dim + p.value_dim);
  parallel_for(heads * tiles, work, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task)
      forward_query_tile(in, task / tiles, task % tiles * kQueryTile, out, lse);
  });
}

// ---- backward ---------------------------------------------------------------

// The probabilities of a rows x cols tile recomputed from its scores:
// P = exp(s - lse_i), 0 where masked or where the row kept no key.
void probabilities(const float* lse, int64_t rows, int64_t cols, float* scores) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * cols;
    if (lse[r] == kMinusInf) {
      std::fill(row, row + cols, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) row[c] -= lse[r];  // -inf stays -inf: exp gives 0
    exp_n(row, row, cols);
  }
}

// From P and dP = dO V^T of a tile: z P (for dV) into `weights`, and
// dS = P (z dP - delta_i) into `grad_scores`, z being the dropout factor. A
// row that kept no key (lse -inf, out NaN) contributes nothing: its NaN
// delta must not reach the keys' gradients.
void score_gradients(const AttentionProblem& p, int64_t bh, int64_t i0, int64_t j0, int64_t rows, int64_t cols,
                     const float* lse, const float* delta, float* weights, float* grad_scores) {
  for (int64_t r = 0; r < rows; ++r) {
    float* prob = weights + r * cols;
    float* ds = grad_scores + r * cols;
    if (lse[r] == kMinusInf) {
      std::fill(ds, ds + cols, 0.0f);
      continue;
    }
    if (p.dropout_p > 0.0f) {
      float z[kKeyTile];
      dropout_factors(p, bh, i0 + r, j0, cols, z);
      for (int64_t c = 0; c < cols; ++c) {
        ds[c] = prob[c] * (z[c] * ds[c] - delta[r]);
        prob[c] *= z[c];
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) ds[c] = prob[c] * (ds[c] - delta[r]);
    }
  }
}

// What backward reads beyond q, k and v: out (contiguous, as forward wrote
// it), grad_out (any rows) and lse.
template <typename S>
struct Upstream {
  const S* out;
  Rows<S> grad_out;
  const float* lse;
};

// rowsum(grad_out * out) of each of head bh's query rows.
template <typename S>
std::vector<float> output_dots(const AttentionProblem& p, const ConstMatrix& grad_out, const S* out) {
  const int64_t dv = p.value_dim;
  std::vector<float> delta(static_cast<size_t>(p.q_len));
  for (int64_t i = 0; i < p.q_len; ++i) {
    float dot = 0.0f;
    for (int64_t c = 0; c < dv; ++c) dot += grad_out(i, c) * static_cast<float>(out[i * dv + c]);
    delta[static_cast<size_t>(i)] = dot;
  }
  return delta;
}

// One K/V head's task: its keys' gradients, summed over the query heads of
// its group in order (a group of one without grouped-query attention), and
// the grad_q of each of those query heads.
template <typename S>
void backward_kv_head(const Heads<S>& in, const Upstream<S>& up, int64_t kvbh, S* grad_q, S* grad_k, S* grad_v) {
  const AttentionProblem& p = in.p;
  const int64_t tq = p.q_len, tk = p.k_len, d = p.head_dim, dv = p.value_dim;
  const int64_t first_head = attention::first_query_head(p, kvbh);
  const auto group = static_cast<size_t>(p.heads / attention::kv_head_count(p));
  Scratch& s = scratch();
  const ConstMatrix k = in.k.as_f32(kvbh, 0, tk, s.k), v = in.v.as_f32(kvbh, 0, tk, s.v);
  // Each query head of the group: its q and grad_out rows as f32, delta, and its dq accumulator.
  struct QueryHead {
    std::vector<float> q, grad_out, grad_q, delta;
  };
  std::vector<QueryHead> heads(group);
  std::vector<ConstMatrix> qs, douts;
  for (size_t g = 0; g < group; ++g) {
    const int64_t bh = first_head + static_cast<int64_t>(g);
    qs.push_back(in.q.as_f32(bh, 0, tq, heads[g].q));
    douts.push_back(up.grad_out.as_f32(bh, 0, tq, heads[g].grad_out));
    heads[g].delta = output_dots(p, douts[g], up.out + bh * tq * dv);
    heads[g].grad_q.assign(static_cast<size_t>(tq * d), 0.0f);
  }
  float* scores = sized(s.scores, kQueryTile * kKeyTile);
  float* grad_scores = sized(s.grad_scores, kQueryTile * kKeyTile);
  for (int64_t j0 = 0; j0 < tk; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, tk - j0);
    const auto kt = k.middleRows(j0, cols);
    const auto vt = v.middleRows(j0, cols);
    Matrix dk(sized(s.grad_k, cols * d), cols, d), dvt(sized(s.grad_v, cols * dv), cols, dv);
    dk.setZero();
    dvt.setZero();
    // Causal: queries before this key tile's first key see none of it.
    const int64_t first_query = p.causal ? std::min(j0, tq) / kQueryTile * kQueryTile : 0;
    for (size_t g = 0; g < group; ++g) {
      const int64_t bh = first_head + static_cast<int64_t>(g);
      const float* head_lse = up.lse + bh * tq;
      Matrix dq(heads[g].grad_q.data(), tq, d);
      for (int64_t i0 = first_query; i0 < tq; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, tq - i0);
        const auto qt = qs[g].middleRows(i0, rows);
        const auto dot = douts[g].middleRows(i0, rows);
        Matrix prob(scores, rows, cols), ds(grad_scores, rows, cols);
        prob.noalias() = p.scale * (qt * kt.transpose());
        mask_scores(p, bh, i0, j0, rows, cols, scores);
        probabilities(head_lse + i0, rows, cols, scores);
        ds.noalias() = dot * vt.transpose();  // dP
        score_gradients(p, bh, i0, j0, rows, cols, head_lse + i0, heads[g].delta.data() + i0, scores, grad_scores);
        dvt.noalias() += prob.transpose() * dot;
        dk.noalias() += p.scale * (ds.transpose() * qt);
        dq.middleRows(i0, rows).noalias() += ds * kt;
      }
    }
    store(dk.data(), cols * d, 1.0f, grad_k + (kvbh * tk + j0) * d);
    store(dvt.data(), cols * dv, 1.0f, grad_v + (kvbh * tk + j0) * dv);
  }
  for (size_t g = 0; g < group; ++g) {
    const int64_t bh = first_head + static_cast<int64_t>(g);
    store(heads[g].grad_q.data(), tq * d, p.scale, grad_q + bh * tq * d);
  }
}

template <typename S>
void backward_typed(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& grad_out, const Tensor& lse, S* grad_q, S* grad_k, S* grad_v) {
  const Heads<S> in{p, Rows<S>(q), Rows<S>(k), Rows<S>(v)};
  const Upstream<S> up{static_cast<const S*>(out.data_ptr()), Rows<S>(grad_out),
                       static_cast<const float*>(lse.data_ptr())};
  const int64_t work = p.q_len * p.k_len * (2 * p.head_dim + 2 * p.value_dim);
  parallel_for(p.batch * attention::kv_head_count(p), work, [&](int64_t begin, int64_t end) {
    for (int64_t kvbh = begin; kvbh < end; ++kvbh) backward_kv_head(in, up, kvbh, grad_q, grad_k, grad_v);
  });
}

template <typename Body>
void visit_fused_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case kF32: body(float{}); return;
    case kBF16: body(BFloat16{}); return;
    case kF16: body(Half{}); return;
    default: fail("attention (CPU fused): takes f32, f16 or bf16, got {}", dtype);
  }
}

}  // namespace

void attention_forward(const AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse) {
  if (problem.batch * problem.heads * problem.q_len == 0) return;
  visit_fused_dtype(q.dtype(), [&](auto tag) {
    using S = decltype(tag);
    forward_typed<S>(problem, q, k, v, static_cast<S*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
  });
}

void attention_backward(const AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& grad_out, const Tensor& lse, const Tensor& grad_q,
                        const Tensor& grad_k, const Tensor& grad_v) {
  if (problem.batch * problem.heads == 0) return;
  visit_fused_dtype(q.dtype(), [&](auto tag) {
    using S = decltype(tag);
    backward_typed<S>(problem, q, k, v, out, grad_out, lse, static_cast<S*>(grad_q.data_ptr()),
                      static_cast<S*>(grad_k.data_ptr()), static_cast<S*>(grad_v.data_ptr()));
  });
}

}  // namespace mt::kernels::cpu
