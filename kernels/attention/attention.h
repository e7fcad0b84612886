// Fused attention (flash-attention style): on SIM and CUDA tensors the
// kernels of kernels/attention/ladder/ (the ladder and its speeds are in that
// folder's README), on the CPU cpu.cpp's tiled kernel. The op,
// scaled_dot_product_attention (autograd/ops_attention.cpp), decides when
// they run; everywhere else it runs the reference path
// (matmul -> softmax -> matmul).
//
// Tensors are [B, H, T, D] of one dtype (f32, f16 or bf16) on one device;
// they are made contiguous here. lse is f32 [B, H, Tq].
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "kernels/attention/api.h"
#include "kernels/attention/cpu.h"
#include "kernels/common/dispatch_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

// Which implementation scaled_dot_product_attention uses on f32/f16/bf16
// tensors of any device, from MT_ATTENTION: auto (or unset) runs the fused
// kernels where they apply and, on a GPU, where their rung has passed its
// check there (attention_kernel_verified); own runs them regardless; math
// always runs the reference path.
enum class AttentionBackend { Auto, Own, Math };

inline AttentionBackend attention_backend_from_env() {
  const char* value = std::getenv("MT_ATTENTION");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return AttentionBackend::Auto;
  if (std::strcmp(value, "own") == 0) return AttentionBackend::Own;
  if (std::strcmp(value, "math") == 0) return AttentionBackend::Math;
  fail("MT_ATTENTION='{}': expected auto, own or math", value);
}

// The problem of [B, H, T, D] tensors q, k, v (the mask pointer is filled in by attention_forward).
inline AttentionProblem attention_problem(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                          bool causal) {
  AttentionProblem p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.q_len = q.size(2);
  p.k_len = k.size(2);
  p.head_dim = q.size(3);
  p.value_dim = v.size(3);
  p.kv_heads = k.size(1);  // fewer than q's heads: grouped-query attention
  p.scale = static_cast<float>(scale);
  p.causal = causal;
  return p;
}

// The fastest rung that takes this problem, forward and backward: v3
// (Tensor Cores) for f16/bf16 with D == Dv in {64, 128}, else v2.
inline AttentionKernel best_attention_kernel(DType dtype, const AttentionProblem& p) {
  const bool tensor_core_shape = p.head_dim == p.value_dim && (p.head_dim == 64 || p.head_dim == 128);
  return (dtype == kF16 || dtype == kBF16) && tensor_core_shape ? AttentionKernel::V3TensorCore
                                                                : AttentionKernel::V2Scalar;
}

// May `auto` run `kernel` on `device` (kernels/verify/trust.h)? v3 falls
// back to v2 for operands off 16-byte alignment, so it needs both verified.
// Warns once for a rung that is not: the reference path serves instead.
inline bool attention_kernel_verified(AttentionKernel kernel, Device device) {
  for (const verify::OwnFamily family : {verify::OwnFamily::AttentionV3, verify::OwnFamily::AttentionV2}) {
    if (family == verify::OwnFamily::AttentionV3 && kernel != AttentionKernel::V3TensorCore) continue;
    if (!verify::own_family_trusted(family, device)) {
      verify::warn_untrusted(family, device);
      return false;
    }
  }
  return true;
}

namespace detail {

// The operands of one fused call as the kernels read them (contiguous, one
// dtype; the attn_mask as given: a [B, H, Tq, Tk] view, bool or f32), kept
// alive for the call; points the problem at the masks.
struct AttentionOperands {
  Tensor q, k, v, padding, mask;
};

// A [B, H, T, width] operand as the kernel reads it: on the CPU
// (`strided_rows`) the view itself when it is `dtype` with its last dim
// contiguous (the kernel reads rows through their strides), else - and
// always for the GPU kernels - a contiguous `dtype` buffer.
inline Tensor readable_rows(const Tensor& t, DType dtype, bool strided_rows) {
  const bool readable = strided_rows && t.dtype() == dtype && t.stride(-1) == 1;
  return readable ? t : device_buffers::contiguous_as(t, dtype);
}

inline AttentionOperands attention_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& key_padding, const Tensor& attn_mask,
                                            AttentionProblem& problem, bool strided_rows) {
  const DType dtype = q.dtype();
  AttentionOperands in{readable_rows(q, dtype, strided_rows), readable_rows(k, dtype, strided_rows),
                       readable_rows(v, dtype, strided_rows),
                       key_padding.defined() ? key_padding.contiguous() : Tensor(), attn_mask};
  problem.key_padding = in.padding.defined() ? static_cast<const bool*>(in.padding.data_ptr()) : nullptr;
  problem.keep_mask = nullptr;
  problem.bias_mask = nullptr;
  if (attn_mask.defined()) {
    MT_CHECK(attn_mask.dim() == 4 && (attn_mask.dtype() == kBool || attn_mask.dtype() == kF32),
             "attention: the fused kernels take an attn_mask as a bool or f32 [B, H, Tq, Tk] view, got {} {}",
             attn_mask.dtype(), attn_mask.shape_string());
    if (attn_mask.dtype() == kBool) {
      problem.keep_mask = static_cast<const bool*>(attn_mask.data_ptr());
    } else {
      problem.bias_mask = static_cast<const float*>(attn_mask.data_ptr());
    }
    for (int d = 0; d < 4; ++d) problem.mask_strides[d] = attn_mask.stride(d);
  }
  return in;
}

// v3 moves 16-byte chunks; a view that starts off that alignment takes v2.
inline bool sixteen_byte_aligned(std::initializer_list<Tensor> tensors) {
  for (const Tensor& t : tensors) {
    if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  }
  return true;
}

}  // namespace detail

// out [B, H, Tq, Dv] and lse [B, H, Tq] (f32) from q, k, v; key_padding is
// bool [B, Tk], attn_mask a bool or f32 view [B, H, Tq, Tk] (strides 0 along
// broadcast dims); either may be undefined.
inline void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                              const Tensor& attn_mask, AttentionProblem problem, AttentionKernel kernel,
                              const Tensor& out, const Tensor& lse) {
  const Backend backend = backend_for(out.device(), "attention_forward");
  using namespace device_buffers;
  const DType dtype = q.dtype();
  const bool on_cpu = backend == Backend::Cpu;
  const detail::AttentionOperands in = detail::attention_operands(q, k, v, key_padding, attn_mask, problem, on_cpu);
  const Tensor vout = output_buffer(out, dtype), vlse = output_buffer(lse, kF32);
  if (on_cpu) {
    cpu::attention_forward(problem, in.q, in.k, in.v, vout, vlse);
  } else {
    if (!detail::sixteen_byte_aligned({in.q, in.k, in.v})) kernel = AttentionKernel::V2Scalar;
    MT_DEVICE_CALL(backend, attention_forward, kernel_dtype(dtype, "attention_forward"), problem, kernel,
                   in.q.data_ptr(), in.k.data_ptr(), in.v.data_ptr(), vout.data_ptr(),
                   static_cast<float*>(vlse.data_ptr()), launch_stream(out.device()));
  }
  finish_output(vout, out);
  finish_output(vlse, lse);
}

// grad_q, grad_k, grad_v (each shaped and typed as its input) from grad_out.
inline void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                               const Tensor& attn_mask, const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                               AttentionProblem problem, AttentionKernel kernel, const Tensor& grad_q,
                               const Tensor& grad_k, const Tensor& grad_v) {
  const Backend backend = backend_for(grad_q.device(), "attention_backward");
  using namespace device_buffers;
  const DType dtype = q.dtype();
  const bool on_cpu = backend == Backend::Cpu;
  const detail::AttentionOperands in = detail::attention_operands(q, k, v, key_padding, attn_mask, problem, on_cpu);
  const Tensor cout = contiguous_as(out, dtype), clse = contiguous_as(lse, kF32);
  const Tensor cdo = detail::readable_rows(grad_out, dtype, on_cpu);
  const Tensor dq = output_buffer(grad_q, dtype), dk = output_buffer(grad_k, dtype), dv = output_buffer(grad_v, dtype);
  const auto* lse_data = static_cast<const float*>(clse.data_ptr());
  if (on_cpu) {
    cpu::attention_backward(problem, in.q, in.k, in.v, cout, cdo, clse, dq, dk, dv);
  } else {
    const Tensor delta = empty({problem.batch, problem.heads, problem.q_len}, kF32, q.device());
    if (!detail::sixteen_byte_aligned({in.q, in.k, in.v, cdo})) kernel = AttentionKernel::V2Scalar;
    MT_DEVICE_CALL(backend, attention_backward, kernel_dtype(dtype, "attention_backward"), problem, kernel,
                   in.q.data_ptr(), in.k.data_ptr(), in.v.data_ptr(), cout.data_ptr(), cdo.data_ptr(), lse_data,
                   static_cast<float*>(delta.data_ptr()), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                   launch_stream(grad_q.device()));
  }
  finish_output(dq, grad_q);
  finish_output(dk, grad_k);
  finish_output(dv, grad_v);
}

}  // namespace mt::kernels
