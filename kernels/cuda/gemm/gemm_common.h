// Pieces every GEMM version shares (private to kernels/cuda/gemm): operand
// addressing for the NN/NT/TN/TT layouts, argument checks, and the epilogue
// (bias, ReLU, one rounding on store).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/element.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/launch.h"

namespace mt::MT_KERNEL_NS::gemm_detail {

using kernels::GemmArgs;

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Host-side checks shared by every entry point.
inline void check_args(const GemmArgs& args, const char* version) {
  auto fail = [&](const char* what) {
    throw std::invalid_argument(std::string(version) + ": " + what + " (m=" + std::to_string(args.m) +
                                ", n=" + std::to_string(args.n) + ", k=" + std::to_string(args.k) +
                                ", batch=" + std::to_string(args.batch) + ")");
  };
  if (args.m < 0 || args.n < 0 || args.k < 0 || args.batch < 0) fail("negative size");
  if (args.batch > 65535) fail("batch above 65535 (grid.z limit)");
  if (args.m > 0 && args.n > 0 && args.c == nullptr) fail("null output");
  if (args.k > 0 && args.m > 0 && args.n > 0 && (args.a == nullptr || args.b == nullptr)) fail("null operand");
  const int64_t need_lda = args.trans_a ? args.m : args.k;
  const int64_t need_ldb = args.trans_b ? args.k : args.n;
  if (args.lda < need_lda || args.ldb < need_ldb || args.ldc < args.n) fail("leading dimension too small");
}

// Element (i, j) of a stored row-major matrix read as op(X): X^T when `trans`.
// row_stride/col_stride turn the four layouts into one addressing rule.
struct OperandStrides {
  int64_t row, col;
};
inline OperandStrides a_strides(const GemmArgs& args) {
  return args.trans_a ? OperandStrides{1, args.lda} : OperandStrides{args.lda, 1};
}
inline OperandStrides b_strides(const GemmArgs& args) {
  return args.trans_b ? OperandStrides{1, args.ldb} : OperandStrides{args.ldb, 1};
}

// The epilogue: bias and ReLU in the accumulator type, then one rounding.
template <typename E>
__device__ __forceinline__ void store_output(const GemmArgs& args, int batch, int row, int col, typename E::Acc value) {
  using Storage = typename E::Storage;
  if (row >= args.m || col >= args.n) return;
  if (args.bias != nullptr) value += E::to_acc(static_cast<const Storage*>(args.bias)[col]);
  if (args.relu) value = value < 0 ? typename E::Acc(0) : value;  // NaN stays NaN, as in PyTorch
  static_cast<Storage*>(args.c)[batch * args.batch_stride_c + static_cast<int64_t>(row) * args.ldc + col] =
      E::from_acc(value);
}

// Fills C with the epilogue of a zero product (k == 0): bias / 0.
template <typename E>
__global__ void empty_k_kernel(GemmArgs args) {
  const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  store_output<E>(args, static_cast<int>(blockIdx.z), row, col, typename E::Acc(0));
}

// True when the entry point has nothing to launch; handles k == 0 itself.
template <typename E>
bool handle_degenerate(const GemmArgs& args, kernels::Stream stream) {
  if (args.m == 0 || args.n == 0 || args.batch == 0) return true;
  if (args.k > 0) return false;
  launch("gemm_empty_k_kernel", empty_k_kernel<E>, dim3(ceil_div(args.n, 128), args.m, args.batch), dim3(128), 0,
         stream, args);
  return true;
}

}  // namespace mt::MT_KERNEL_NS::gemm_detail
