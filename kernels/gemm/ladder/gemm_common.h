// Pieces every GEMM version shares (private to kernels/gemm/ladder): operand
// addressing for the NN/NT/TN/TT layouts, argument checks, and the epilogue
// (bias, activation, one rounding on store).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/element.h"
#include "kernels/elementwise/math.h"
#include "kernels/gemm/api.h"
#include "runtime/launch.h"

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
  if (args.c_is_f32 && (args.dtype == kernels::KernelDType::F64 || args.bias != nullptr ||
                        args.activation != kernels::GemmActivation::None || args.pre_activation != nullptr)) {
    fail("an f32 C (c_is_f32) takes f16/bf16/f32 operands and no bias, activation or pre-activation");
  }
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

// The epilogue's activation, in the accumulator type, with the elementwise
// ops' own formulas (ReLU keeps a NaN, as PyTorch's does).
template <typename Acc>
__device__ __forceinline__ Acc activate(kernels::GemmActivation activation, Acc z) {
  using kernels::UnaryOp;
  switch (activation) {
    case kernels::GemmActivation::None: return z;
    case kernels::GemmActivation::Relu: return kernels::unary_forward<UnaryOp::Relu>(z, Acc(0), Acc(0));
    case kernels::GemmActivation::GeluErf: return kernels::unary_forward<UnaryOp::GeluErf>(z, Acc(0), Acc(0));
    case kernels::GemmActivation::GeluTanh: return kernels::unary_forward<UnaryOp::GeluTanh>(z, Acc(0), Acc(0));
  }
  return z;
}

// INT8's epilogue (v9 and the vendor path, int8_vendor.cu, so the two agree
// bit for bit): the exact s32 sum to f32, times the column's scale, the
// bias and the activation in f32, one rounding into out [m, n].
template <bool OutBf16>
__device__ __forceinline__ void store_int8_output(const kernels::Int8Gemm& g, int64_t row, int64_t col, int32_t exact,
                                                  void* out) {
  float value = static_cast<float>(exact) * g.scales[col];
  if (g.bias != nullptr) value += g.bias[col];
  value = activate(g.activation, value);
  if constexpr (OutBf16) {
    static_cast<uint16_t*>(out)[row * g.n + col] = element::BF16::from_acc(value);
  } else {
    static_cast<float*>(out)[row * g.n + col] = value;
  }
}

// The epilogue: bias and activation in the accumulator type, then one
// rounding (and, when asked, the pre-activation stored beside C).
template <typename E>
__device__ __forceinline__ void store_output(const GemmArgs& args, int batch, int row, int col, typename E::Acc value) {
  using Storage = typename E::Storage;
  if (row >= args.m || col >= args.n) return;
  const int64_t offset = batch * args.batch_stride_c + static_cast<int64_t>(row) * args.ldc + col;
  if (args.c_is_f32) {  // split-K partials: no epilogue, no rounding to the operand dtype
    static_cast<float*>(args.c)[offset] = static_cast<float>(value);
    return;
  }
  if (args.bias != nullptr) value += E::to_acc(static_cast<const Storage*>(args.bias)[col]);
  if (args.pre_activation != nullptr) static_cast<Storage*>(args.pre_activation)[offset] = E::from_acc(value);
  static_cast<Storage*>(args.c)[offset] = E::from_acc(activate(args.activation, value));
}

// C = act(Z) for a Z already in memory (pre_activation, or C itself): the
// second pass a library GEMM without this epilogue needs.
template <typename E>
__global__ void activation_pass_kernel(GemmArgs args) {
  using Storage = typename E::Storage;
  const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  if (col >= args.n) return;
  const int64_t offset = blockIdx.z * args.batch_stride_c + static_cast<int64_t>(row) * args.ldc + col;
  const Storage* z = static_cast<const Storage*>(args.pre_activation != nullptr ? args.pre_activation : args.c);
  static_cast<Storage*>(args.c)[offset] = E::from_acc(activate(args.activation, E::to_acc(z[offset])));
}

// Fills C with the epilogue of a zero product (k == 0): bias / 0.
template <typename E>
__global__ void empty_k_kernel(GemmArgs args) {
  const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  store_output<E>(args, static_cast<int>(blockIdx.z), row, col, typename E::Acc(0));
}

inline void launch_activation_pass(const GemmArgs& args, kernels::Stream stream) {
  element::visit(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    launch("gemm_activation_pass_kernel", activation_pass_kernel<E>, dim3(ceil_div(args.n, 128), args.m, args.batch),
           dim3(128), 0, stream, args);
  });
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
