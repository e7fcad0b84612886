// INT8 quantize and dequantize on the GPU (and the simulator).
//
// What: INT8 inference keeps a quantized Linear's weight as I8 with a scale
// per output channel, and quantizes each input to 8 bits with the scale its
// calibration chose just before the INT8 GEMM; dequantize is the way back
// (and what tests and `mixtape quantize` check against).
//
// How: one grid-stride loop, one element per thread per step, its channel's
// scale and zero point read through the cache (per tensor: one value every
// thread reads).
//
// Precision: x is widened to f32, divided by the scale once (correctly
// rounded), rounded half to even, clamped to the dtype's range in float and
// only then converted (kernels/quantize/math.h: the same code the CPU runs).
// Dequantize is one f32 multiply rounded once into the output dtype.
//
// Bound: memory bandwidth (2-4 bytes read, 1 written per element). Measured
// speed: not yet measured on a GPU.
#include "kernels/elementwise/loop.h"
#include "kernels/quantize/api.h"
#include "kernels/quantize/math.h"
#include "runtime/launch.h"  // first: defines __host__/__device__ for the simulator build

namespace mt::MT_KERNEL_NS {

namespace {

constexpr int kQuantizeThreads = 256;

dim3 grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kQuantizeThreads - 1) / kQuantizeThreads;
  return dim3(static_cast<unsigned>(blocks < 4096 ? blocks : 4096));
}

__global__ void int8_quantize_kernel(TensorRef x, const float* scales, const std::int32_t* zero_points,
                                     kernels::QuantizeAxis axis, TensorRef out) {
  const std::int32_t lo = kernels::quantized_min(out.dtype), hi = kernels::quantized_max(out.dtype);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < x.numel; i += step) {
    const std::int64_t c = axis.channel(i);
    const std::int32_t q =
        kernels::quantize_value(load_as<float>(x.data, x.dtype, i), scales[c], zero_points[c], lo, hi);
    if (out.dtype == DType::U8) {
      static_cast<std::uint8_t*>(out.data)[i] = static_cast<std::uint8_t>(q);
    } else {
      static_cast<std::int8_t*>(out.data)[i] = static_cast<std::int8_t>(q);
    }
  }
}

__global__ void int8_dequantize_kernel(TensorRef q, const float* scales, const std::int32_t* zero_points,
                                       kernels::QuantizeAxis axis, TensorRef out) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < q.numel; i += step) {
    const std::int64_t c = axis.channel(i);
    const std::int32_t v = q.dtype == DType::U8 ? static_cast<std::int32_t>(static_cast<const std::uint8_t*>(q.data)[i])
                                                : static_cast<std::int32_t>(static_cast<const std::int8_t*>(q.data)[i]);
    store_as<float>(out.data, out.dtype, i, kernels::dequantize_value(v, scales[c], zero_points[c]));
  }
}

}  // namespace

void int8_quantize(const TensorRef& x, const float* scales, const std::int32_t* zero_points, kernels::QuantizeAxis axis,
                   const TensorRef& out, Stream stream) {
  if (x.numel == 0) return;
  kernels::declare_launch_work(kernels::distinct_bytes(x) + kernels::distinct_bytes(out));
  launch("int8_quantize_kernel", int8_quantize_kernel, grid_for(x.numel), dim3(kQuantizeThreads), 0, stream, x, scales,
         zero_points, axis, out);
}

void int8_dequantize(const TensorRef& q, const float* scales, const std::int32_t* zero_points,
                     kernels::QuantizeAxis axis, const TensorRef& out, Stream stream) {
  if (q.numel == 0) return;
  kernels::declare_launch_work(kernels::distinct_bytes(q) + kernels::distinct_bytes(out));
  launch("int8_dequantize_kernel", int8_dequantize_kernel, grid_for(q.numel), dim3(kQuantizeThreads), 0, stream, q,
         scales, zero_points, axis, out);
}

}  // namespace mt::MT_KERNEL_NS
