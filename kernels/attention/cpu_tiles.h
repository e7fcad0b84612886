// What the CPU fused attention's forward (cpu.cpp) and backward
// (cpu_backward.cpp) share: the tile sizes, the per-thread scratch, an
// operand's rows read in place or widened to f32, the masks and the dropout
// factors of a score tile. Private to those two files; the algorithm and its
// precision are described at the top of cpu.cpp.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernels/attention/api.h"
#include "kernels/attention/cpu_bf16_tiles.h"
#include "kernels/attention/math.h"
#include "runtime/error.h"
#include "runtime/half.h"

namespace mt::kernels::cpu::attention_tiles {

constexpr int64_t kQueryTile = 64;  // query rows per forward task and backward step
constexpr int64_t kKeyTile = 64;    // keys per score tile

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Matrix = Eigen::Map<RowMajor>;                                      // contiguous f32 scratch
using ConstMatrix = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;  // rows of an operand, as f32
constexpr float kMinusInf = -INFINITY;
// The BF16 dot products of cpu_bf16_tiles.h, for the Bf16Forward/Bf16Backward tiles.
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
inline Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

inline float* sized(std::vector<float>& buffer, int64_t n) {
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
inline void mask_scores(const AttentionProblem& p, int64_t bh, int64_t i0, int64_t j0, int64_t rows, int64_t cols,
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
inline void dropout_factors(const AttentionProblem& p, int64_t bh, int64_t i, int64_t j0, int64_t cols,
                            float* factors) {
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
inline float row_max(const float* row, int64_t n) {
  float m = kMinusInf;
  for (int64_t c = 0; c < n; ++c) m = row[c] > m ? row[c] : m;
  return m;
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

}  // namespace mt::kernels::cpu::attention_tiles
