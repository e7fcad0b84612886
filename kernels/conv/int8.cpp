// The CPU's INT8 convolution (kernels/conv/cpu.h): each sample's patches
// gathered as rows of u8 (im2row: [OH*OW, C*kH*kW], the layout the INT8
// GEMM reads its activations in), then the INT8 GEMM of
// kernels/gemm/int8.cpp (oneDNN's VNNI/AMX u8 x s8 -> s32 matmul where the
// CPU has it, else an exact s32 loop) against the weight [O, C*kH*kW], and
// the [OH*OW, O] result written back transposed into NCHW, rounded once.
// Samples go in chunks of about 8 MiB of rows so the patch matrix of a large
// batch is never whole.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/conv/cpu.h"
#include "kernels/gemm/cpu.h"

namespace mt::kernels::cpu {
namespace {

// Sample n's patches: rows[p, (c*kH + i)*kW + j] = x[n, c, oy*s + i*d - pad, ox*s + j*d - pad]
// (the zero point outside the image).
void im2row(const Int8Conv2d& conv, int64_t n, uint8_t* rows) {
  const ConvShape& g = conv.shape;
  const int64_t k = g.patch();
  const uint8_t pad = static_cast<uint8_t>(conv.x_zero_point);
  const uint8_t* x = conv.x + n * g.in_channels * g.in_h * g.in_w;
  for (int64_t oy = 0; oy < g.out_h; ++oy) {
    for (int64_t ox = 0; ox < g.out_w; ++ox) {
      uint8_t* row = rows + (oy * g.out_w + ox) * k;
      for (int64_t c = 0; c < g.in_channels; ++c) {
        for (int64_t i = 0; i < g.kernel_h; ++i) {
          const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dilation_h;
          for (int64_t j = 0; j < g.kernel_w; ++j) {
            const int64_t ix = ox * g.stride_w - g.pad_w + j * g.dilation_w;
            const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
            *row++ = inside ? x[(c * g.in_h + iy) * g.in_w + ix] : pad;
          }
        }
      }
    }
  }
}

}  // namespace

void int8_conv2d(const Int8Conv2d& conv, const Tensor& y) {
  const ConvShape& g = conv.shape;
  MT_CHECK(g.groups == 1, "int8_conv2d: grouped convolutions are not supported (groups = {})", g.groups);
  MT_CHECK(y.is_contiguous() && (y.dtype() == kF32 || y.dtype() == kBF16) && y.dim() == 4 && y.size(0) == g.batch &&
               y.size(1) == g.out_channels && y.size(2) == g.out_h && y.size(3) == g.out_w,
           "int8_conv2d: y must be a contiguous f32 or bf16 [{}, {}, {}, {}], got {} {}", g.batch, g.out_channels,
           g.out_h, g.out_w, y.dtype(), y.shape_string());
  const int64_t k = g.patch(), plane = g.out_plane();
  if (g.batch == 0 || plane == 0) return;
  const int64_t samples_per_chunk = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, plane * k));
  OutputBuffer<float> out(y);
  for (int64_t first = 0; first < g.batch; first += samples_per_chunk) {
    const int64_t count = std::min(samples_per_chunk, g.batch - first);
    std::vector<uint8_t> rows(static_cast<size_t>(count * plane * k));
    parallel_for(count, plane * k, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) im2row(conv, first + s, rows.data() + s * plane * k);
    });
    const Tensor product = empty({count * plane, g.out_channels});
    int8_gemm({.m = count * plane,
               .n = g.out_channels,
               .k = k,
               .a = rows.data(),
               .a_zero_point = conv.x_zero_point,
               .b = conv.weight,
               .scales = conv.scales,
               .bias = conv.bias,
               .activation = conv.activation},
              product);
    // [samples, plane, O] -> [samples, O, plane]
    const float* p = product.data<float>();
    float* dst = out.data() + first * g.out_channels * plane;
    parallel_for(count * g.out_channels, plane, [&](int64_t begin, int64_t end) {
      for (int64_t so = begin; so < end; ++so) {
        const int64_t s = so / g.out_channels, o = so % g.out_channels;
        for (int64_t q = 0; q < plane; ++q) dst[so * plane + q] = p[(s * plane + q) * g.out_channels + o];
      }
    });
  }
  out.commit();
}

}  // namespace mt::kernels::cpu
