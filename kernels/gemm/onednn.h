// The gemm family's oneDNN path on the CPU (onednn.cpp), tried by cpu::bmm
// before Eigen. Built only where CMake found oneDNN (MT_WITH_ONEDNN).
#pragma once

#include "core/tensor.h"
#include "kernels/gemm/cpu.h"

namespace mt::kernels::cpu {

#if MT_WITH_ONEDNN
// out = a @ b with the epilogue, through oneDNN, when it takes the product
// (f32 or bf16 operands of one dtype, f32 or bf16 out, each matrix row- or
// column-major, an optimised kernel for this CPU) and MT_CPU_GEMM allows it.
// Returns false, having written nothing, when it does not.
bool onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue);
// product[m, n] = scales[n] * sum_k (a[m, k] - a_zero_point) * b[n, k] in
// f32 through oneDNN's INT8 matmul, when the CPU's INT8 products are native
// and MT_CPU_GEMM allows it. Returns false, having written nothing, when not.
bool onednn_int8_gemm(const Int8Gemm& gemm, float* product);
#else
inline bool onednn_bmm(const Tensor&, const Tensor&, const Tensor&, const GemmEpilogue&) { return false; }
inline bool onednn_int8_gemm(const Int8Gemm&, float*) { return false; }
#endif

}  // namespace mt::kernels::cpu
