// The CPU fused attention's backward: one task per K/V head, recomputing
// each tile's probabilities from q, k and the saved lse (the algorithm, its
// precision and its determinism are described at the top of cpu.cpp).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attention/cpu.h"
#include "kernels/attention/cpu_tiles.h"
#include "kernels/common/strided.h"
#include "kernels/common/vector_math.h"

namespace mt::kernels::cpu {
namespace {

using namespace attention_tiles;

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

}  // namespace

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
