// Fused attention on the CPU (flash-attention style): the forward here, the
// backward in cpu_backward.cpp.
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
//   The tile products are Eigen's f32 GEMMs (EigenForward here,
//   EigenBackward in cpu_backward.cpp), except for bf16 on a CPU with
//   AVX512-BF16, where they are BF16 dot products on packed tiles
//   (Bf16Forward, Bf16Backward; cpu_bf16_tiles.h); the steps around them are
//   the same code (cpu_tiles.h).
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

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attention/cpu_tiles.h"
#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"

namespace mt::kernels::cpu {
namespace {

using namespace attention_tiles;

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

}  // namespace

void attention_forward(const AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse) {
  if (problem.batch * problem.heads * problem.q_len == 0) return;
  visit_fused_dtype(q.dtype(), [&](auto tag) {
    using S = decltype(tag);
    forward_typed<S>(problem, q, k, v, static_cast<S*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
  });
}

}  // namespace mt::kernels::cpu
