// Batched matrix multiply: out[b] = a[b] @ b[b].
// a: [batch, M, K], b: [batch, K, N], out: [batch, M, N]; any strides (a
// transposed view is read in place when it is a plain column-major matrix).
//
// CPU tensors run oneDNN's matmul where it takes them, else Eigen
// (kernels/gemm/cpu.cpp). SIM and CUDA tensors run
// kernels/gemm/cuda.cu's gemm(): the own Tensor Core kernel for f16/bf16,
// tiled kernels for f32/f64 — or on a GPU cuBLASLt (MT_GEMM=auto|own|cublaslt;
// auto keeps the faster of the two per shape, measured once, and only among
// own rungs that have passed their check on that GPU: kernels/verify/trust.h).
// An operand that is neither row- nor column-major per batch is copied
// contiguous first; an output that is not row-major gets a scratch buffer.
#pragma once

#include <algorithm>
#include <climits>

#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/cpu.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

namespace device_buffers {

// One bmm operand as the GEMM kernels read it.
struct GemmOperand {
  Tensor tensor;
  int64_t ld = 1, batch_stride = 0;
  bool transposed = false;  // stored column-major (the transpose is row-major)
};

inline GemmOperand gemm_operand(const Tensor& t, DType dtype) {
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t s0 = t.stride(0), s1 = t.stride(1), s2 = t.stride(2);
  if (t.dtype() == dtype) {
    if (s2 == 1 && s1 >= std::max<int64_t>(cols, 1)) return {t, s1, s0, false};
    if (s1 == 1 && s2 >= std::max<int64_t>(rows, 1)) return {t, s2, s0, true};
  }
  Tensor c = empty(t.sizes(), dtype, t.device());
  kernels::copy(t, c);
  return {c, std::max<int64_t>(cols, 1), rows * cols, false};
}

}  // namespace device_buffers

// True when the Hopper rungs (v6-v8) can run `args` on this back end.
inline bool gemm_hopper_supports_on(Backend backend, const GemmArgs& args) {
  if (backend == Backend::Sim) return ::mt::sim::gemm_hopper_supports(args);
  if constexpr (kCudaKernelsBuilt) return ::mt::cuda::gemm_hopper_supports(args);
  return false;
}

// The own rung gemm() would run for `args` (kernels/gemm/cuda.cu's gemm_own).
inline verify::OwnFamily own_gemm_family(const GemmArgs& args, Backend backend) {
  switch (args.dtype) {
    case KernelDType::F16:
    case KernelDType::BF16:
      return gemm_hopper_supports_on(backend, args) ? verify::OwnFamily::GemmV7 : verify::OwnFamily::GemmV5;
    case KernelDType::F32: return verify::OwnFamily::GemmV3;
    case KernelDType::F64: return verify::OwnFamily::GemmV2;
  }
  return verify::OwnFamily::GemmV3;
}

// What the dispatcher asks gemm() for: with MT_GEMM=auto (or unset), an own
// rung only where it has passed its check on this device, else cuBLASLt (on
// sim treated as a GPU, the v1 rung standing in for it), with one warning.
// MT_GEMM=own or cublaslt is the user's explicit choice: gemm() reads it.
inline GemmBackend verified_gemm_backend(const GemmArgs& args, Device device, Backend backend) {
  if (gemm_backend_from_environment() != GemmBackend::Auto) return GemmBackend::Auto;  // gemm() honours it
  const verify::OwnFamily family = own_gemm_family(args, backend);
  if (verify::own_family_trusted(family, device)) return GemmBackend::Auto;
  verify::warn_untrusted(family, device);
  return device.is_sim() ? GemmBackend::Reference : GemmBackend::CublasLt;
}

inline void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue = {}) {
  MT_CHECK(!epilogue.bias.defined() || (epilogue.bias.dim() == 1 && epilogue.bias.size(0) == out.size(2)),
           "bmm kernel: bias {} does not match {} output columns", epilogue.bias.shape_string(), out.size(2));
  const Tensor& pre = epilogue.pre_activation;
  MT_CHECK(!pre.defined() || (pre.sizes() == out.sizes() && pre.dtype() == out.dtype() &&
                              pre.device() == out.device() && pre.is_contiguous() && out.is_contiguous()),
           "bmm kernel: the pre-activation output must be contiguous like the output {} ({})", out.shape_string(),
           out.dtype());
  const Backend backend = backend_for(out.device(), "bmm");
  if (backend == Backend::Cpu) return cpu::bmm(a, b, out, epilogue);
  using namespace device_buffers;
  MT_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && a.size(0) == b.size(0) && a.size(0) == out.size(0) &&
               a.size(2) == b.size(1) && out.size(1) == a.size(1) && out.size(2) == b.size(2),
           "bmm kernel: shapes {} @ {} -> {} do not line up", a.shape_string(), b.shape_string(), out.shape_string());
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  MT_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "bmm kernel: {} @ {} has a dimension above 2^31 - 1",
           a.shape_string(), b.shape_string());
  const DType dtype = out.dtype();
  const GemmOperand A = gemm_operand(a, dtype), B = gemm_operand(b, dtype);
  Tensor c = out;
  int64_t ldc = std::max<int64_t>(n, 1), batch_stride_c = m * n;
  if (out.stride(2) == 1 && out.stride(1) >= std::max<int64_t>(n, 1)) {
    ldc = out.stride(1);
    batch_stride_c = out.stride(0);
  } else {
    c = empty(out.sizes(), dtype, out.device());
  }
  GemmArgs args;
  args.dtype = kernel_dtype(dtype, "bmm");
  args.m = static_cast<int>(m), args.n = static_cast<int>(n), args.k = static_cast<int>(k);
  args.lda = A.ld, args.batch_stride_a = A.batch_stride, args.trans_a = A.transposed;
  args.ldb = B.ld, args.batch_stride_b = B.batch_stride, args.trans_b = B.transposed;
  args.ldc = ldc, args.batch_stride_c = batch_stride_c;
  const Tensor bias = epilogue.bias.defined() ? contiguous_as(epilogue.bias, dtype) : Tensor();
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.activation = epilogue.activation;
  const size_t element = element_size(dtype);
  const Stream stream = launch_stream(out.device());
  constexpr int64_t kMaxBatchPerLaunch = 65535;  // grid.z
  for (int64_t first = 0; first < batch; first += kMaxBatchPerLaunch) {
    args.batch = static_cast<int>(std::min(kMaxBatchPerLaunch, batch - first));
    args.a = static_cast<const char*>(A.tensor.data_ptr()) + first * A.batch_stride * static_cast<int64_t>(element);
    args.b = static_cast<const char*>(B.tensor.data_ptr()) + first * B.batch_stride * static_cast<int64_t>(element);
    args.c = static_cast<char*>(c.data_ptr()) + first * batch_stride_c * static_cast<int64_t>(element);
    if (pre.defined()) {  // contiguous like c (checked above), so c's strides address it
      args.pre_activation = static_cast<char*>(pre.data_ptr()) + first * batch_stride_c * static_cast<int64_t>(element);
    }
    MT_DEVICE_CALL(backend, gemm, args, verified_gemm_backend(args, out.device(), backend), stream);
  }
  finish_output(c, out);
  if (pre.defined()) mark_written(pre);
}

}  // namespace mt::kernels
