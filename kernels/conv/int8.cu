// INT8 inference's patch gather on the GPU (and the simulator): im2row of
// a u8 image batch, the activations of the INT8 convolution's GEMM.
//
// What: rows[(n * OH*OW + p) * K + k] for every output position p of every
//   sample n and every tap k = (c*kH + i)*kW + j of the window: the input
//   byte under that tap, or the zero point where the window hangs over the
//   padding (the zero point is the value 0, as the float convolution pads).
// How: one thread per row byte, grid-stride; consecutive threads write
//   consecutive bytes of a row (coalesced stores), their reads are a
//   kernel-window's neighbours (cached).
// Then kernels/conv/int8.h multiplies rows [N*OH*OW, K] by the weight
//   [O, K] with the INT8 Tensor Core rung (kernels/gemm/ladder/v9_int8_mma.cu),
//   scales, bias and activation in its epilogue, and transposes the result
//   into NCHW.
// Precision: a copy; nothing rounds.
// Bound: memory (K bytes written per output position, each input byte read
//   up to kH*kW times, mostly from cache). Measured speed: not yet measured
//   on a GPU.
#include "kernels/conv/api.h"
#include "runtime/launch.h"  // first: defines __host__/__device__ for the simulator build

namespace mt::MT_KERNEL_NS {

namespace {

constexpr int kThreads = 256;

__global__ void int8_im2row_kernel(const std::uint8_t* x, std::uint8_t zero_point, kernels::ConvShape g,
                                   std::uint8_t* rows) {
  // groups = 1 (checked by the dispatcher); ConvShape's helpers are host-only.
  const std::int64_t k = g.in_channels * g.kernel_h * g.kernel_w, plane = g.out_h * g.out_w;
  const std::int64_t total = g.batch * plane * k;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += step) {
    const std::int64_t tap = index % k, position = (index / k) % plane, n = index / (k * plane);
    const std::int64_t j = tap % g.kernel_w, i = (tap / g.kernel_w) % g.kernel_h, c = tap / (g.kernel_w * g.kernel_h);
    const std::int64_t oy = position / g.out_w, ox = position % g.out_w;
    const std::int64_t iy = oy * g.stride_h - g.pad_h + i * g.dilation_h;
    const std::int64_t ix = ox * g.stride_w - g.pad_w + j * g.dilation_w;
    const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
    rows[index] = inside ? x[((n * g.in_channels + c) * g.in_h + iy) * g.in_w + ix] : zero_point;
  }
}

}  // namespace

void int8_im2row(const std::uint8_t* x, std::uint8_t zero_point, const kernels::ConvShape& geometry, std::uint8_t* rows,
                 Stream stream) {
  const std::int64_t total = geometry.batch * geometry.out_plane() * geometry.patch();
  if (total == 0) return;
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  kernels::declare_launch_work(static_cast<double>(total) * 2.0);
  launch("int8_im2row_kernel", int8_im2row_kernel, dim3(static_cast<unsigned>(blocks < 4096 ? blocks : 4096)),
         dim3(kThreads), 0, stream, x, zero_point, geometry, rows);
}

}  // namespace mt::MT_KERNEL_NS
