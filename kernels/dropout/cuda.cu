// Dropout with the Philox counter-based RNG, on the same stream as the CPU.
//
// What: out = in * keep / (1 - p) and a u8 keep-mask, where element i is kept
// when u_i >= p and u_i is word i % 4 of Philox-4x32-10 block
// (block_offset + i / 4) under the seed (core/philox.h, shared with the CPU).
// Because the random numbers are a pure function of (seed, counter), the GPU,
// the simulator and the CPU draw the same mask — no generator state on the
// device, and any thread can compute any element's number.
//
// Algorithm: each thread takes groups of four consecutive elements — one
// Philox block gives all four uniforms (10 rounds of 32x32->64 multiplies),
// so no random word is wasted. Backward is an elementwise multiply by the
// saved mask and the same 1/(1-p).
//
// Precision: the scale is computed in f64 and applied in f32 (f64 for f64
// tensors); the output is rounded once.
//
// Bound: memory bandwidth (Philox costs ~40 integer ops per 4 elements,
// well under the byte budget). Measured speed: not yet measured on a GPU.
#include "runtime/launch.h"

#include "core/philox.h"
#include "kernels/dropout/api.h"
#include "kernels/elementwise/loop.h"

namespace mt::MT_KERNEL_NS {

// Operands of `it`: out, in.
template <typename T>
__global__ void dropout_forward_kernel(StridedIter<2> it, std::uint8_t* __restrict__ mask, float p, T scale,
                                       std::uint64_t seed, std::uint64_t block_offset) {
  const std::int64_t groups = (it.numel + 3) / 4;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const PhiloxBlock random = philox4x32_10(seed, block_offset + static_cast<std::uint64_t>(g));
    for (int e = 0; e < 4; ++e) {
      const std::int64_t i = g * 4 + e;
      if (i >= it.numel) break;
      const bool kept = uniform_from_bits(random.word[e]) >= p;
      mask[i] = kept ? 1 : 0;
      std::int64_t off[2];
      operand_offsets(it, i, off);
      const T x = load_as<T>(it.data[1], it.dtype[1], off[1]);
      store_as<T>(it.data[0], it.dtype[0], off[0], kept ? x * scale : T(0));
    }
  }
}

// Operands: grad_in, grad_out, mask.
template <typename T>
__global__ void dropout_backward_kernel(StridedIter<3> it, T scale) {
  elementwise_loop<T>(it, [=](const T (&in)[2]) { return in[1] != T(0) ? in[0] * scale : T(0); });
}

void dropout_forward(const TensorRef& in, const TensorRef& out, const TensorRef& mask, double p, std::uint64_t seed,
                     std::uint64_t block_offset, Stream stream) {
  if (in.numel == 0) return;
  const TensorRef* operands[2] = {&out, &in};
  const auto it = make_strided_iter(operands);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const dim3 grid = elementwise_grid((in.numel + 3) / 4), block(kElementwiseThreads);
  auto* keep = static_cast<std::uint8_t*>(mask.data);
  if (in.dtype == DType::F64) {
    launch("dropout_forward_kernel", dropout_forward_kernel<double>, grid, block, 0, stream, it, keep,
           static_cast<float>(p), scale, seed, block_offset);
  } else {
    launch("dropout_forward_kernel", dropout_forward_kernel<float>, grid, block, 0, stream, it, keep,
           static_cast<float>(p), static_cast<float>(scale), seed, block_offset);
  }
}

void dropout_backward(const TensorRef& grad_out, const TensorRef& mask, const TensorRef& grad_in, double p,
                      Stream stream) {
  if (grad_in.numel == 0) return;
  const TensorRef* operands[3] = {&grad_in, &grad_out, &mask};
  const auto it = make_strided_iter(operands);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const dim3 grid = elementwise_grid(work_items(it)), block(kElementwiseThreads);
  if (grad_in.dtype == DType::F64) {
    launch("dropout_backward_kernel", dropout_backward_kernel<double>, grid, block, 0, stream, it, scale);
  } else {
    launch("dropout_backward_kernel", dropout_backward_kernel<float>, grid, block, 0, stream, it,
           static_cast<float>(scale));
  }
}

}  // namespace mt::MT_KERNEL_NS
