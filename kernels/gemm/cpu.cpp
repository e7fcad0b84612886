// CPU GEMM: oneDNN for f32 and bf16 where this build has it
// (kernels/gemm/onednn.cpp, MT_CPU_GEMM), else Eigen, parallel over fixed
// output tiles (below).
//
// On the Eigen path, f32 and f64 operands are mapped in place when each matrix is plain row- or
// column-major (so A^T and B^T from backward cost no copy); anything else,
// including f16/bf16, is converted to a contiguous f32 buffer first, multiplied
// with f32 accumulation, and rounded once on store.
#include "kernels/gemm/cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <optional>

#include "kernels/common/strided.h"
#include "kernels/gemm/epilogue.h"
#include "kernels/gemm/onednn.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<Eigen::Dynamic>;

// A batched operand as Eigen sees it: a base pointer, a batch stride, and the
// layout of each matrix.
template <typename T>
struct Operand {
  const T* base = nullptr;
  int64_t batch_stride = 0;
  int64_t rows = 0, cols = 0, ld = 0;
  bool row_major = true;
  std::optional<Loaded<T>> converted;  // the operand as contiguous T, when it is not already

  explicit Operand(const Tensor& t) : rows(t.size(1)), cols(t.size(2)) {
    const int64_t s0 = t.stride(0), s1 = t.stride(1), s2 = t.stride(2);
    if (t.dtype() == dtype_of<T>()) {
      const T* p = static_cast<const T*>(t.data_ptr());
      if (s2 == 1 && s1 >= std::max<int64_t>(cols, 1)) {
        set(p, s0, true, s1);
        return;
      }
      if (s1 == 1 && s2 >= std::max<int64_t>(rows, 1)) {
        set(p, s0, false, s2);
        return;
      }
    }
    converted.emplace(t);
    set(converted->data(), rows * cols, true, cols);
  }

  void set(const T* p, int64_t bs, bool rm, int64_t leading) {
    base = p;
    batch_stride = bs;
    row_major = rm;
    ld = std::max<int64_t>(leading, 1);
  }
};

// The output is cut into tiles by its shape alone, never by the thread
// count, and each tile is one single-threaded Eigen product: Eigen's own
// parallel GEMM picks its depth blocking by the thread count, so a product
// (and every loss after it) changed in its last bits when the count did, and
// ThreadTuner changes it mid-run. A product gets one tile per kMinTileWork
// multiply-adds, at most kMaxTiles, each made by halving the larger output
// side while no side falls under kMinTileSide: each extra tile repacks the
// other operand, about 1/side of the tile's work, and with 64-wide tiles a
// single-threaded mlp step was 30% slower than one untiled product.
struct GemmTiles {
  int64_t rows = 1, cols = 1;  // tiles along m and n
  int64_t tm = 0, tn = 0;      // tile height and width (the last ones may be smaller)
};

constexpr int64_t kMaxTiles = 16;
constexpr int64_t kMinTileSide = 128;
constexpr int64_t kMinTileWork = int64_t{1} << 22;  // multiply-adds

GemmTiles gemm_tiles(int64_t batch, int64_t m, int64_t n, int64_t k) {
  GemmTiles t;
  if (batch == 0 || m == 0 || n == 0) return t;  // nothing to compute
  const int64_t work = batch * m * n * k;
  const int64_t wanted = std::clamp<int64_t>(work / kMinTileWork, 1, kMaxTiles);
  const int64_t per_matrix = (wanted + batch - 1) / batch;
  while (t.rows * t.cols < per_matrix) {
    const bool can_split_rows = m / (t.rows * 2) >= kMinTileSide;
    const bool can_split_cols = n / (t.cols * 2) >= kMinTileSide;
    if (can_split_rows && (m / t.rows >= n / t.cols || !can_split_cols)) {
      t.rows *= 2;
    } else if (can_split_cols) {
      t.cols *= 2;
    } else {
      break;
    }
  }
  t.tm = (m + t.rows - 1) / t.rows;
  t.tn = (n + t.cols - 1) / t.cols;
  return t;
}

template <typename T>
using Block = Eigen::Block<Eigen::Map<RowMajor<T>>>;

// C = A @ B for one tile, with A's rows [r0, r0 + h) and B's columns [c0, c0 + w).
template <typename T>
void multiply_tile(const Operand<T>& A, const Operand<T>& B, const T* pa, const T* pb, Block<T> C, int64_t r0,
                   int64_t c0) {
  const int64_t h = C.rows(), w = C.cols(), k = A.cols;
  using RowMap = Eigen::Map<const RowMajor<T>, 0, Stride>;
  using ColMap = Eigen::Map<const ColMajor<T>, 0, Stride>;
  // Four layout combinations; Eigen picks a kernel for each.
  if (A.row_major && B.row_major) {
    const RowMap a(pa, A.rows, k, Stride(A.ld));
    const RowMap b(pb, k, B.cols, Stride(B.ld));
    C.noalias() = a.middleRows(r0, h) * b.middleCols(c0, w);
  } else if (A.row_major) {
    const RowMap a(pa, A.rows, k, Stride(A.ld));
    const ColMap b(pb, k, B.cols, Stride(B.ld));
    C.noalias() = a.middleRows(r0, h) * b.middleCols(c0, w);
  } else if (B.row_major) {
    const ColMap a(pa, A.rows, k, Stride(A.ld));
    const RowMap b(pb, k, B.cols, Stride(B.ld));
    C.noalias() = a.middleRows(r0, h) * b.middleCols(c0, w);
  } else {
    const ColMap a(pa, A.rows, k, Stride(A.ld));
    const ColMap b(pb, k, B.cols, Stride(B.ld));
    C.noalias() = a.middleRows(r0, h) * b.middleCols(c0, w);
  }
}

template <typename T>
void bmm_typed(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue) {
  Operand<T> A(a), B(b);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  std::optional<Loaded<T>> bias;
  if (epilogue.bias.defined()) bias.emplace(epilogue.bias);
  OutputBuffer<T> dst(out);
  std::optional<OutputBuffer<T>> pre;
  if (epilogue.pre_activation.defined()) pre.emplace(epilogue.pre_activation);
  const bool any_epilogue = bias || pre || epilogue.activation != GemmActivation::None;
  const GemmTiles tiles = gemm_tiles(batch, m, n, k);
  const int64_t per_matrix = tiles.rows * tiles.cols;
  parallel_for(batch * per_matrix, tiles.tm * tiles.tn * std::max<int64_t>(k, 1), [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t i = tile / per_matrix;
      const int64_t r0 = (tile % per_matrix) / tiles.cols * tiles.tm;
      const int64_t c0 = (tile % per_matrix) % tiles.cols * tiles.tn;
      const int64_t h = std::min(tiles.tm, m - r0), w = std::min(tiles.tn, n - c0);
      if (h <= 0 || w <= 0) continue;
      T* c = dst.data() + i * m * n;
      Eigen::Map<RowMajor<T>> C(c, m, n);
      multiply_tile(A, B, A.base + i * A.batch_stride, B.base + i * B.batch_stride, C.block(r0, c0, h, w), r0, c0);
      if (any_epilogue) {
        apply_epilogue(c, pre ? pre->data() + i * m * n : nullptr, n, r0, h, c0, w, bias ? bias->data() : nullptr,
                       epilogue.activation);
      }
    }
  });
  dst.commit();
  if (pre) pre->commit();
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue) {
  MT_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && a.size(0) == b.size(0) && a.size(0) == out.size(0) &&
               a.size(2) == b.size(1) && out.size(1) == a.size(1) && out.size(2) == b.size(2),
           "bmm kernel: shapes {} @ {} -> {} do not line up", a.shape_string(), b.shape_string(), out.shape_string());
  if (out.dtype() == kF64) {
    bmm_typed<double>(a, b, out, epilogue);
  } else if (!onednn_bmm(a, b, out, epilogue)) {
    bmm_typed<float>(a, b, out, epilogue);
  }
}

}  // namespace mt::kernels::cpu
