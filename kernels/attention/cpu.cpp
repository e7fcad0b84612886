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
//     S = scale Q K^T, the masks, then the
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
//   The tile products are Eigen's f32 GEMMs (EigenForward, EigenBackward),
//   except for bf16 on a CPU with AVX512-BF16, where they are BF16 dot
//   products on packed tiles (Bf16Forward, Bf16Backward; cpu_bf16_tiles.h);
//   the steps around them are the same code.
//   Only lse (4 bytes per query row) is saved beyond q, k, v and out, where
//   the reference path saves the T x T probabilities.
// Precision: scores, statistics, accumulators and gradients are f32; each
//   output is rounded once. On Eigen's path f16/bf16 tiles widen exactly to
//   f32. On the BF16 dot-product path the weights P (times the dropout
//   factor) and the score gradients dS are rounded to bf16 as they enter
//   their products, as the GPU's tensor-core rung rounds them (q, k, v and
//   grad_out are bf16 already); the sums stay f32. A row
//   with every key masked has l = 0: out is NaN (as the reference path and
//   PyTorch's math path) and lse -inf; backward gives it zero gradients.
// Determinism: every output element is summed by one task in a fixed order,
//   so results do not depend on the thread count. They do depend on the
//   path: a CPU with AVX512-BF16 and one without (or MT_CPU_GEMM=eigen)
//   differ in bf16 by the rounding of P and dS, within bf16's tolerance.
// Speed (bench/cpu_attention_bench, bench/results/cpu_attention.md; 2-core
//   AMD EPYC with AVX512-BF16, causal, B=1 H=12 D=64, forward + backward,
//   tokens/s): bf16 70421 at T = 256, 29835 at 1024, 8385 at 4096 (2.2x,
//   3.0x and 7.3x the reference path; on Eigen's tiles it was 57148, 20579
//   and 5401), with 42 MiB of peak tensor memory against 1176 at 4096; f32
//   69257, 22071, 6302. In gpt-small bf16 training (perf) the BF16 products
//   and their packing take 8.7% of the step where Eigen's took 10.6%: the
//   products run near this CPU's BF16 peak, and what is left is packing,
//   the softmax's exp and bookkeeping.
#include "kernels/attention/cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "kernels/attention/cpu_bf16_tiles.h"
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
using bf16_tiles::multiply;
using bf16_tiles::pack_pairs;
using bf16_tiles::pack_pairs_of_transpose;
using bf16_tiles::pack_rows;
using bf16_tiles::pack_rows_of_transpose;

// Per-thread f32 buffers, grown on first use and kept (tasks on one thread
// reuse them).
struct Scratch {
  std::vector<float> q, k, v, scores, grad_scores, acc, grad_k, grad_v;
  std::vector<uint16_t> packed_q, packed_k, packed_v, packed_weights;  // bf16 dot products' operands
  std::vector<std::vector<uint16_t>> packed_heads;                     // backward's per-head operands
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

// The two products of a forward query tile, on f32 tiles through Eigen (f16
// and bf16 rows widened exactly first).
template <typename S>
class EigenForward {
 public:
  EigenForward(const Heads<S>& in, int64_t bh, int64_t i0, int64_t rows)
      : in_(in), s_(scratch()), q_(in.q.as_f32(bh, i0, rows, s_.q)) {}
  // scores = scale q k^T against keys [j0, j0 + cols) of K/V head kvbh.
  void scores(int64_t kvbh, int64_t j0, int64_t cols, float* scores) {
    const ConstMatrix k = in_.k.as_f32(kvbh, j0, cols, s_.k);
    Matrix(scores, q_.rows(), cols).noalias() = in_.p.scale * (q_ * k.transpose());
  }
  // acc += weights v over the same keys.
  void add_values(int64_t kvbh, int64_t j0, int64_t cols, const float* weights, float* acc) {
    const ConstMatrix v = in_.v.as_f32(kvbh, j0, cols, s_.v);
    const ConstMatrix w(weights, q_.rows(), cols, Eigen::OuterStride<>(cols));
    Matrix(acc, q_.rows(), in_.p.value_dim).noalias() += w * v;
  }

 private:
  const Heads<S>& in_;
  Scratch& s_;
  ConstMatrix q_;
};

// The same products in BF16 dot products (cpu_bf16_tiles.h): q, k and v are
// packed as they are; the weights are rounded to bf16 for the product with v.
class Bf16Forward {
 public:
  Bf16Forward(const Heads<BFloat16>& in, int64_t bh, int64_t i0, int64_t rows)
      : in_(in), s_(scratch()), q_(pack_rows(in.q.row(bh, i0), in.q.row_stride, rows, in.q.width, s_.packed_q)) {}
  void scores(int64_t kvbh, int64_t j0, int64_t cols, float* scores) {
    const auto k = pack_pairs_of_transpose(in_.k.row(kvbh, j0), in_.k.row_stride, cols, in_.k.width, s_.packed_k);
    multiply(q_, k, in_.p.scale, false, scores, cols);
  }
  void add_values(int64_t kvbh, int64_t j0, int64_t cols, const float* weights, float* acc) {
    const auto v = pack_pairs(in_.v.row(kvbh, j0), in_.v.row_stride, cols, in_.v.width, s_.packed_v);
    multiply(pack_rows(weights, cols, q_.m, cols, s_.packed_weights), v, 1.0f, true, acc, in_.p.value_dim);
  }

 private:
  const Heads<BFloat16>& in_;
  Scratch& s_;
  bf16_tiles::Bf16Rows q_;
};

template <typename S, typename Products>
void forward_query_tile(const Heads<S>& in, int64_t bh, int64_t i0, S* out, float* lse) {
  const AttentionProblem& p = in.p;
  const int64_t rows = std::min(kQueryTile, p.q_len - i0), dv = p.value_dim;
  Scratch& s = scratch();
  Products products(in, bh, i0, rows);
  RowState state;
  std::fill(state.m, state.m + rows, kMinusInf);
  std::fill(state.l, state.l + rows, 0.0f);
  state.acc = sized(s.acc, rows * dv);
  std::fill(state.acc, state.acc + rows * dv, 0.0f);
  float* scores = sized(s.scores, kQueryTile * kKeyTile);
  const int64_t keys = attention::key_end(p, i0, rows);
  const int64_t kvbh = attention::kv_head(p, bh);  // grouped-query: the K/V head this query head reads
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, keys - j0);
    products.scores(kvbh, j0, cols, scores);
    mask_scores(p, bh, i0, j0, rows, cols, scores);
    online_softmax_step(p, bh, i0, j0, rows, cols, scores, state);
    products.add_values(kvbh, j0, cols, scores, state.acc);
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
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / tiles, i0 = task % tiles * kQueryTile;
      if constexpr (std::is_same_v<S, BFloat16>) {
        if (bf16_tiles::available()) {
          forward_query_tile<S, Bf16Forward>(in, bh, i0, out, lse);
          continue;
        }
      }
      forward_query_tile<S, EigenForward<S>>(in, bh, i0, out, lse);
    }
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
std::vector<float> output_dots(const AttentionProblem& p, const Rows<S>& grad_out, int64_t bh, const S* out) {
  const int64_t dv = p.value_dim;
  std::vector<float> delta(static_cast<size_t>(p.q_len));
  for (int64_t i = 0; i < p.q_len; ++i) {
    const S* dout = grad_out.row(bh, i);
    float dot = 0.0f;
    for (int64_t c = 0; c < dv; ++c) dot += static_cast<float>(dout[c]) * static_cast<float>(out[i * dv + c]);
    delta[static_cast<size_t>(i)] = dot;
  }
  return delta;
}

// The five products of one K/V head's backward, on f32 tiles through Eigen
// (f16 and bf16 rows widened exactly first): the head's k and v, and q and
// grad_out of each query head g of its group, are read once per task.
template <typename S>
class EigenBackward {
 public:
  EigenBackward(const Heads<S>& in, const Upstream<S>& up, int64_t kvbh, int64_t first_head, size_t group)
      : p_(in.p), s_(scratch()), k_(in.k.as_f32(kvbh, 0, p_.k_len, s_.k)), v_(in.v.as_f32(kvbh, 0, p_.k_len, s_.v)) {
    storage_.resize(2 * group);
    for (size_t g = 0; g < group; ++g) {
      const int64_t bh = first_head + static_cast<int64_t>(g);
      q_.push_back(in.q.as_f32(bh, 0, p_.q_len, storage_[2 * g]));
      grad_out_.push_back(up.grad_out.as_f32(bh, 0, p_.q_len, storage_[2 * g + 1]));
    }
  }
  // scores = scale q k^T for query rows [i0, i0 + rows) of head g, keys [j0, j0 + cols).
  void scores(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* scores) const {
    Matrix(scores, rows, cols).noalias() =
        p_.scale * (q_[g].middleRows(i0, rows) * k_.middleRows(j0, cols).transpose());
  }
  // dP = grad_out v^T over the same tile.
  void grad_weights(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* dp) const {
    Matrix(dp, rows, cols).noalias() = grad_out_[g].middleRows(i0, rows) * v_.middleRows(j0, cols).transpose();
  }
  // dv += weights^T grad_out, dk += scale dS^T q (the tile's keys), dq += dS k (the tile's queries).
  void accumulate(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, const float* weights,
                  const float* grad_scores, float* dk, float* dv, float* dq) const {
    const int64_t d = p_.head_dim;
    const ConstMatrix w(weights, rows, cols, Eigen::OuterStride<>(cols));
    const ConstMatrix ds(grad_scores, rows, cols, Eigen::OuterStride<>(cols));
    Matrix(dv, cols, p_.value_dim).noalias() += w.transpose() * grad_out_[g].middleRows(i0, rows);
    Matrix(dk, cols, d).noalias() += p_.scale * (ds.transpose() * q_[g].middleRows(i0, rows));
    Matrix(dq + i0 * d, rows, d).noalias() += ds * k_.middleRows(j0, cols);
  }

 private:
  const AttentionProblem& p_;
  Scratch& s_;
  ConstMatrix k_, v_;
  std::vector<std::vector<float>> storage_;
  std::vector<ConstMatrix> q_, grad_out_;
};

// The same products in BF16 dot products (cpu_bf16_tiles.h): the head's
// operands packed once per task in the layouts each product reads, the
// tile's weights and score gradients rounded to bf16 as they are packed.
class Bf16Backward {
 public:
  Bf16Backward(const Heads<BFloat16>& in, const Upstream<BFloat16>& up, int64_t kvbh, int64_t first_head, size_t group)
      : p_(in.p), s_(scratch()) {
    const int64_t tq = p_.q_len, tk = p_.k_len;
    s_.packed_heads.resize(std::max(s_.packed_heads.size(), 4 * group + 3));
    auto storage = s_.packed_heads.begin();
    k_transposed_ = pack_pairs_of_transpose(in.k.row(kvbh, 0), in.k.row_stride, tk, in.k.width, *storage++);
    v_transposed_ = pack_pairs_of_transpose(in.v.row(kvbh, 0), in.v.row_stride, tk, in.v.width, *storage++);
    k_ = pack_pairs(in.k.row(kvbh, 0), in.k.row_stride, tk, in.k.width, *storage++);
    for (size_t g = 0; g < group; ++g) {
      const int64_t bh = first_head + static_cast<int64_t>(g);
      const Rows<BFloat16>& q = in.q;
      const Rows<BFloat16>& grad_out = up.grad_out;
      q_rows_.push_back(pack_rows(q.row(bh, 0), q.row_stride, tq, q.width, *storage++));
      q_.push_back(pack_pairs(q.row(bh, 0), q.row_stride, tq, q.width, *storage++));
      grad_out_rows_.push_back(pack_rows(grad_out.row(bh, 0), grad_out.row_stride, tq, grad_out.width, *storage++));
      grad_out_.push_back(pack_pairs(grad_out.row(bh, 0), grad_out.row_stride, tq, grad_out.width, *storage++));
    }
  }
  void scores(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* scores) const {
    multiply(q_rows_[g].rows(i0, rows), k_transposed_.columns(j0, cols), p_.scale, false, scores, cols);
  }
  void grad_weights(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* dp) const {
    multiply(grad_out_rows_[g].rows(i0, rows), v_transposed_.columns(j0, cols), 1.0f, false, dp, cols);
  }
  void accumulate(size_t g, int64_t i0, int64_t rows, int64_t j0, int64_t cols, const float* weights,
                  const float* grad_scores, float* dk, float* dv, float* dq) const {
    const int64_t d = p_.head_dim;
    multiply(pack_rows_of_transpose(weights, cols, rows, cols, s_.packed_weights), grad_out_[g].row_range(i0, rows),
             1.0f, true, dv, p_.value_dim);
    multiply(pack_rows_of_transpose(grad_scores, cols, rows, cols, s_.packed_weights), q_[g].row_range(i0, rows),
             p_.scale, true, dk, d);
    multiply(pack_rows(grad_scores, cols, rows, cols, s_.packed_weights), k_.row_range(j0, cols), 1.0f, true,
             dq + i0 * d, d);
  }

 private:
  const AttentionProblem& p_;
  Scratch& s_;
  bf16_tiles::Bf16Pairs k_transposed_, v_transposed_, k_;
  std::vector<bf16_tiles::Bf16Rows> q_rows_, grad_out_rows_;
  std::vector<bf16_tiles::Bf16Pairs> q_, grad_out_;
};

// One K/V head's task: its keys' gradients, summed over the query heads of
// its group in order (a group of one without grouped-query attention), and
// the grad_q of each of those query heads.
template <typename S, typename Products>
void backward_kv_head(const Heads<S>& in, const Upstream<S>& up, int64_t kvbh, S* grad_q, S* grad_k, S* grad_v) {
  const AttentionProblem& p = in.p;
  const int64_t tq = p.q_len, tk = p.k_len, d = p.head_dim, dv = p.value_dim;
  const int64_t first_head = attention::first_query_head(p, kvbh);
  const auto group = static_cast<size_t>(p.heads / attention::kv_head_count(p));
  Scratch& s = scratch();
  const Products products(in, up, kvbh, first_head, group);
  // Each query head of the group: delta and its f32 dq accumulator.
  std::vector<std::vector<float>> deltas(group), grad_qs(group);
  for (size_t g = 0; g < group; ++g) {
    const int64_t bh = first_head + static_cast<int64_t>(g);
    deltas[g] = output_dots(p, up.grad_out, bh, up.out + bh * tq * dv);
    grad_qs[g].assign(static_cast<size_t>(tq * d), 0.0f);
  }
  float* scores = sized(s.scores, kQueryTile * kKeyTile);
  float* grad_scores = sized(s.grad_scores, kQueryTile * kKeyTile);
  for (int64_t j0 = 0; j0 < tk; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, tk - j0);
    float* dk = sized(s.grad_k, cols * d);
    float* dvt = sized(s.grad_v, cols * dv);
    std::fill(dk, dk + cols * d, 0.0f);
    std::fill(dvt, dvt + cols * dv, 0.0f);
    // Causal: queries before this key tile's first key see none of it.
    const int64_t first_query = p.causal ? std::min(j0, tq) / kQueryTile * kQueryTile : 0;
    for (size_t g = 0; g < group; ++g) {
      const int64_t bh = first_head + static_cast<int64_t>(g);
      const float* head_lse = up.lse + bh * tq;
      for (int64_t i0 = first_query; i0 < tq; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, tq - i0);
        products.scores(g, i0, rows, j0, cols, scores);
        mask_scores(p, bh, i0, j0, rows, cols, scores);
        probabilities(head_lse + i0, rows, cols, scores);
        products.grad_weights(g, i0, rows, j0, cols, grad_scores);  // dP
        score_gradients(p, bh, i0, j0, rows, cols, head_lse + i0, deltas[g].data() + i0, scores, grad_scores);
        products.accumulate(g, i0, rows, j0, cols, scores, grad_scores, dk, dvt, grad_qs[g].data());
      }
    }
    store(dk, cols * d, 1.0f, grad_k + (kvbh * tk + j0) * d);
    store(dvt, cols * dv, 1.0f, grad_v + (kvbh * tk + j0) * dv);
  }
  for (size_t g = 0; g < group; ++g) {
    const int64_t bh = first_head + static_cast<int64_t>(g);
    store(grad_qs[g].data(), tq * d, p.scale, grad_q + bh * tq * d);
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
    for (int64_t kvbh = begin; kvbh < end; ++kvbh) {
      if constexpr (std::is_same_v<S, BFloat16>) {
        if (bf16_tiles::available()) {
          backward_kv_head<S, Bf16Backward>(in, up, kvbh, grad_q, grad_k, grad_v);
          continue;
        }
      }
      backward_kv_head<S, EigenBackward<S>>(in, up, kvbh, grad_q, grad_k, grad_v);
    }
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
