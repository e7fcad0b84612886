// INT8 quantize and dequantize, dispatched: the CPU back end or the
// CUDA/sim kernels. Op code (autograd/int8.cpp) calls these with contiguous
// tensors; scales (f32) and zero points (i32) hold one value per channel of
// the axis (or one per tensor) on the data's device.
#pragma once

#include "kernels/dispatch.h"
#include "kernels/quantize/api.h"
#include "kernels/quantize/cpu.h"

namespace mt::kernels {

namespace detail {
inline void check_quantize_operands(const char* op, const Tensor& x, const Tensor& q, const Tensor& scales,
                                    const Tensor& zero_points, QuantizeAxis axis) {
  MT_CHECK(x.is_contiguous() && q.is_contiguous(), "{}: expected contiguous tensors", op);
  MT_CHECK(x.device() == q.device(), "{}: input on {} but output on {}", op, x.device(), q.device());
  MT_CHECK(x.numel() == q.numel(), "{}: input has {} elements, output {}", op, x.numel(), q.numel());
  MT_CHECK(q.dtype() == kI8 || q.dtype() == kU8, "{}: the quantized tensor must be i8 or u8, got {}", op, q.dtype());
  MT_CHECK(axis.channels >= 1 && axis.inner >= 1, "{}: invalid channel axis", op);
  MT_CHECK(scales.dtype() == kF32 && scales.is_contiguous() && scales.numel() == axis.channels &&
               scales.device() == x.device(),
           "{}: scales must be {} contiguous f32 values on {}", op, axis.channels, x.device());
  MT_CHECK(zero_points.dtype() == kI32 && zero_points.is_contiguous() && zero_points.numel() == axis.channels &&
               zero_points.device() == x.device(),
           "{}: zero points must be {} contiguous i32 values on {}", op, axis.channels, x.device());
}
}  // namespace detail

// out = quantize(x) in out's dtype (i8 or u8): kernels/quantize/math.h.
inline void int8_quantize(const Tensor& x, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                          const Tensor& out) {
  detail::check_quantize_operands("int8_quantize", x, out, scales, zero_points, axis);
  MT_CHECK(is_compute_float(x.dtype()), "int8_quantize: quantizes floating data, got {}", x.dtype());
  const Backend backend = backend_for(x.device(), "int8_quantize");
  if (backend == Backend::Cpu) return cpu::int8_quantize(x, scales, zero_points, axis, out);
  MT_DEVICE_CALL(backend, int8_quantize, tensor_ref(x), static_cast<const float*>(scales.data_ptr()),
                 static_cast<const std::int32_t*>(zero_points.data_ptr()), axis, tensor_ref(out),
                 launch_stream(x.device()));
  mark_written(out);
}

// out = (q - zero_point) * scale, rounded once into out's floating dtype.
inline void int8_dequantize(const Tensor& q, const Tensor& scales, const Tensor& zero_points, QuantizeAxis axis,
                            const Tensor& out) {
  detail::check_quantize_operands("int8_dequantize", out, q, scales, zero_points, axis);
  MT_CHECK(is_compute_float(out.dtype()), "int8_dequantize: dequantizes into a floating dtype, got {}", out.dtype());
  const Backend backend = backend_for(q.device(), "int8_dequantize");
  if (backend == Backend::Cpu) return cpu::int8_dequantize(q, scales, zero_points, axis, out);
  MT_DEVICE_CALL(backend, int8_dequantize, tensor_ref(q), static_cast<const float*>(scales.data_ptr()),
                 static_cast<const std::int32_t*>(zero_points.data_ptr()), axis, tensor_ref(out),
                 launch_stream(q.device()));
  mark_written(out);
}

}  // namespace mt::kernels
