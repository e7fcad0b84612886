// CPU GEMM through Eigen (parallel over both cores with OpenMP).
//
// f32 and f64 operands are mapped in place when each matrix is plain row- or
// column-major (so A^T and B^T from backward cost no copy); anything else,
// including f16/bf16, is converted to a contiguous f32 buffer first, multiplied
// with f32 accumulation, and rounded once on store.
#include "kernels/matmul.h"

#include <Eigen/Core>
#include <optional>

#include "kernels/common/elementwise.h"
#include "kernels/cpu/strided.h"

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
  std::vector<T> owned;

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
    Loaded<T> loaded(t);
    owned.assign(loaded.data(), loaded.data() + loaded.size());
    set(owned.data(), rows * cols, true, cols);
  }

  void set(const T* p, int64_t bs, bool rm, int64_t leading) {
    base = p;
    batch_stride = bs;
    row_major = rm;
    ld = std::max<int64_t>(leading, 1);
  }
};

// The epilogue's activation with the elementwise ops' formulas.
template <typename T>
T activate(GemmActivation activation, T z) {
  switch (activation) {
    case GemmActivation::None: return z;
    case GemmActivation::Relu: return unary_forward<UnaryOp::Relu>(z, T(0), T(0));
    case GemmActivation::GeluErf: return unary_forward<UnaryOp::GeluErf>(z, T(0), T(0));
    case GemmActivation::GeluTanh: return unary_forward<UnaryOp::GeluTanh>(z, T(0), T(0));
  }
  return z;
}

// Bias and activation on the unrounded product, as the GPU epilogue does;
// `pre` (or null) receives the pre-activation. `bias` is in T (null for none).
template <typename T>
void apply_epilogue(T* c, T* pre, int64_t rows, int64_t cols, const T* bias, GemmActivation activation) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = c + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const T z = bias == nullptr ? row[j] : row[j] + bias[j];
      if (pre != nullptr) pre[r * cols + j] = z;
      row[j] = activate(activation, z);
    }
  }
}

template <typename T>
void bmm_typed(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue) {
  Operand<T> A(a), B(b);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
  std::optional<Loaded<T>> bias;
  if (epilogue.bias.defined()) bias.emplace(epilogue.bias);
  OutputBuffer<T> dst(out);
  std::optional<OutputBuffer<T>> pre;
  if (epilogue.pre_activation.defined()) pre.emplace(epilogue.pre_activation);
  const bool any_epilogue = bias || pre || epilogue.activation != GemmActivation::None;
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<RowMajor<T>> C(dst.data() + i * m * n, m, n);
    const T* pa = A.base + i * A.batch_stride;
    const T* pb = B.base + i * B.batch_stride;
    // Four layout combinations; Eigen picks a kernel for each.
    if (A.row_major && B.row_major) {
      C.noalias() = Eigen::Map<const RowMajor<T>, 0, Stride>(pa, A.rows, A.cols, Stride(A.ld)) *
                    Eigen::Map<const RowMajor<T>, 0, Stride>(pb, B.rows, B.cols, Stride(B.ld));
    } else if (A.row_major) {
      C.noalias() = Eigen::Map<const RowMajor<T>, 0, Stride>(pa, A.rows, A.cols, Stride(A.ld)) *
                    Eigen::Map<const ColMajor<T>, 0, Stride>(pb, B.rows, B.cols, Stride(B.ld));
    } else if (B.row_major) {
      C.noalias() = Eigen::Map<const ColMajor<T>, 0, Stride>(pa, A.rows, A.cols, Stride(A.ld)) *
                    Eigen::Map<const RowMajor<T>, 0, Stride>(pb, B.rows, B.cols, Stride(B.ld));
    } else {
      C.noalias() = Eigen::Map<const ColMajor<T>, 0, Stride>(pa, A.rows, A.cols, Stride(A.ld)) *
                    Eigen::Map<const ColMajor<T>, 0, Stride>(pb, B.rows, B.cols, Stride(B.ld));
    }
    if (any_epilogue) {
      apply_epilogue(dst.data() + i * m * n, pre ? pre->data() + i * m * n : nullptr, m, n,
                     bias ? bias->data() : nullptr, epilogue.activation);
    }
  }
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
  } else {
    bmm_typed<float>(a, b, out, epilogue);
  }
}

}  // namespace mt::kernels::cpu
