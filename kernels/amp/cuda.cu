// AMP kernels: the fused inf-check + unscale over all gradients, and the
// one-thread loss-scale update.
//
// What: unscale_and_check_inf sets found_inf = 1 when any element of any
// gradient is inf or NaN (and, when asked, a flag per gradient: which ones,
// for --explain-skips) and multiplies every element by inv_scale (read on
// the device). update_scale applies PyTorch's rule (backoff on inf, growth
// after growth_interval clean steps) to device scalars. Nothing here is ever
// read by the host, so a training step needs no synchronisation and can be
// captured in a CUDA graph later.
//
// Algorithm: multi_tensor_apply (multi_tensor.h) — one launch covers up to 192
// chunks of 65536 elements from up to 48 tensors (more tensors: a few more
// launches); each block walks its chunk with 512 threads. A thread that sees
// a non-finite value stores 1.0f into found_inf: every writer writes the same
// value, so the race is benign and no atomic is needed. update_scale is a
// single thread — it is one scalar, and keeping it on the device is the point.
//
// Precision: gradients are read as f32, multiplied in f32 and rounded once
// back to their dtype (the CPU path's exact arithmetic).
//
// Bound: memory bandwidth (one read + one write per element). Measured speed:
// not yet measured on a GPU.
#include "runtime/launch.h"

#include "kernels/elementwise/loop.h"
#include "kernels/amp/api.h"
#include "kernels/common/multi_tensor.h"

namespace mt::MT_KERNEL_NS {

__device__ __forceinline__ bool is_finite(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }

__global__ void __launch_bounds__(kMultiTensorThreads)
    unscale_and_check_inf_kernel(FlatTensorTable table, float* found_inf, const float* inv_scale,
                                 float* per_tensor) {
  const int slot = table.chunks.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_range(table.chunks.block_chunk[blockIdx.x], table.numel[slot], begin, end);
  void* data = table.data[slot];
  const DType dtype = table.dtype[slot];
  const float factor = inv_scale != nullptr ? *inv_scale : 1.0f;
  bool nonfinite = false;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = load_as<float>(data, dtype, i);
    nonfinite |= !is_finite(v);
    if (inv_scale != nullptr) store_as<float>(data, dtype, i, v * factor);
  }
  if (nonfinite) {
    *found_inf = 1.0f;
    if (per_tensor != nullptr) per_tensor[table.index[slot]] = 1.0f;  // --explain-skips names the tensor
  }
}

__global__ void update_scale_kernel(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, std::int64_t growth_interval,
                                    double min_scale, double max_scale) {
  float s = *scale;
  std::int32_t tracker = *growth_tracker;
  if (*found_inf != 0.0f) {
    s = static_cast<float>(s * backoff_factor);
    if (min_scale > 0 && s < min_scale) s = static_cast<float>(min_scale);
    tracker = 0;
  } else if (++tracker >= growth_interval) {
    const auto grown = static_cast<float>(s * growth_factor);
    if (is_finite(grown)) s = grown;
    if (max_scale > 0 && s > max_scale) s = static_cast<float>(max_scale);
    tracker = 0;
  }
  *scale = s;
  *growth_tracker = tracker;
}

void unscale_and_check_inf(const TensorRef* tensors, int count, float* found_inf, const float* inv_scale,
                           float* per_tensor, Stream stream) {
  for_each_flat_launch(tensors, count, [&](const FlatTensorTable& table, std::int64_t) {
    launch("unscale_and_check_inf_kernel", unscale_and_check_inf_kernel, dim3(table.chunks.num_blocks),
           dim3(kMultiTensorThreads), 0, stream, table, found_inf, inv_scale, per_tensor);
  });
}

void update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, std::int64_t growth_interval, double min_scale, double max_scale,
                  Stream stream) {
  launch("update_scale_kernel", update_scale_kernel, dim3(1), dim3(1), 0, stream, scale, growth_tracker, found_inf,
         growth_factor, backoff_factor, growth_interval, min_scale, max_scale);
}

}  // namespace mt::MT_KERNEL_NS
