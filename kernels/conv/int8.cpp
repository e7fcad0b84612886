// The CPU's INT8 convolution (kernels/conv/cpu.h). Where the CPU's INT8
// products are native, oneDNN's u8 x s8 convolution (onednn.cpp: VNNI's
// vpdpbusd or AMX, s32 accumulation); its VNNI kernels leave the s32 sums
// channels-last, and the epilogue here reads them there, scaling and
// transposing into NCHW in one pass (8 x 8 register tiles), then adds the
// bias and the activation. Elsewhere each sample's patches are gathered as
// rows of u8 (im2row: [OH*OW, C*kH*kW], the layout the INT8 GEMM reads its
// activations in) and multiplied by the weight [O, C*kH*kW] with the INT8
// GEMM of kernels/gemm/int8.cpp, in chunks of about 8 MiB of rows so the
// patch matrix of a large batch is never whole, and the [OH*OW, O] result
// is written back transposed into NCHW. Both sums are exact in s32; bias and
// activation follow on the f32 value, then the one rounding into y.
//
// Speed (2-core AMD EPYC with AVX512-VNNI, 2 threads, the Fashion-MNIST
// cnn's evaluation, batches of 512): see bench/results/cpu_int8.md.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/strided.h"
#include "kernels/conv/cpu.h"
#include "kernels/conv/onednn.h"
#include "kernels/gemm/cpu.h"
#include "kernels/gemm/epilogue.h"
#include "kernels/quantize/cpu.h"

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

// y = scales[o] * sum_k (rows - zero point) w over every sample, through
// im2row and the INT8 GEMM (no bias, no activation).
void im2row_int8_conv2d(const Int8Conv2d& conv, float* y) {
  const ConvShape& g = conv.shape;
  const int64_t k = g.patch(), plane = g.out_plane();
  const int64_t samples_per_chunk = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, plane * k));
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
               .scales = conv.scales},
              product);
    // [samples, plane, O] -> [samples, O, plane]
    const float* p = product.data<float>();
    float* dst = y + first * g.out_channels * plane;
    parallel_for(count * g.out_channels, plane, [&](int64_t begin, int64_t end) {
      for (int64_t so = begin; so < end; ++so) {
        const int64_t s = so / g.out_channels, o = so % g.out_channels;
        for (int64_t q = 0; q < plane; ++q) dst[so * plane + q] = p[(s * plane + q) * g.out_channels + o];
      }
    });
  }
}

// act(scale * sum + bias) of a run of positions of one output channel: the
// loops plain so they vectorise (with the activation's switch inside, per
// element, this pass was 13% of an INT8 cnn's evaluation).
void finish_channel_run(const Int8Conv2d& conv, int64_t o, float* values, int64_t n) {
  const float bias = conv.bias != nullptr ? conv.bias[o] : 0.0f;
  for (int64_t q = 0; q < n; ++q) values[q] += bias;
  apply_epilogue(values, static_cast<float*>(nullptr), n, 0, 1, 0, n, static_cast<const float*>(nullptr),
                 conv.activation);
}

#if defined(__AVX2__)
// 8 x 8 s32 -> f32 transposed in registers: rows[r] holds positions q0 + r
// of channels o0 .. o0 + 7; on return rows[c] holds channel o0 + c's
// positions q0 .. q0 + 7. Three rounds of lane shuffles (unpack, shuffle,
// cross-half permute), the textbook 8 x 8 transpose.
void transpose8x8(__m256 rows[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      u[4 * i + 2 * j] = _mm256_shuffle_ps(t[4 * i + j], t[4 * i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * i + 2 * j + 1] = _mm256_shuffle_ps(t[4 * i + j], t[4 * i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  }
  for (int i = 0; i < 4; ++i) {
    rows[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    rows[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
#endif

// out[o, q] = sums[q, o] * scales[o] for a sample's [plane, channels] block:
// 8 x 8 tiles transposed in registers where the CPU has AVX2 (a plain loop
// with the stores 'plane' apart was 9% of the INT8 cnn's evaluation), the
// ragged edges one value at a time.
void transpose_scaled(const int32_t* sums, int64_t plane, int64_t channels, const float* scales, float* out) {
  int64_t q0 = 0, o_end = 0;
#if defined(__AVX2__)
  o_end = channels / 8 * 8;
  for (; q0 + 8 <= plane; q0 += 8) {
    for (int64_t o0 = 0; o0 < o_end; o0 += 8) {
      __m256 rows[8];
      for (int r = 0; r < 8; ++r) {
        const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + (q0 + r) * channels + o0));
        rows[r] = _mm256_cvtepi32_ps(s);
      }
      transpose8x8(rows);
      for (int c = 0; c < 8; ++c) {
        _mm256_storeu_ps(out + (o0 + c) * plane + q0, _mm256_mul_ps(rows[c], _mm256_set1_ps(scales[o0 + c])));
      }
    }
  }
#endif
  // What the tiles left: positions q0.. for every channel, and channels
  // o_end.. for the tiled positions.
  for (int64_t q = 0; q < plane; ++q) {
    for (int64_t o = q < q0 ? o_end : 0; o < channels; ++o) {
      out[o * plane + q] = static_cast<float>(sums[q * channels + o]) * scales[o];
    }
  }
}

// The sums as oneDNN's VNNI kernels wrote them, [N, OH*OW, O]: a sample's
// block (OH*OW*O sums, 100 KiB for the cnn's first layer: in L2) is scaled
// and transposed into [O, OH*OW] in a buffer, then each channel's plane
// takes the epilogue and goes to `out`, so the transposition into NCHW
// rides in the epilogue's one pass. (Smaller tiles cost more in per-call
// overhead than they saved: 16 positions per call made the INT8 cnn's
// evaluation 20% slower than oneDNN's reorder.)
void finish_channels_last(const Int8Conv2d& conv, const int32_t* sums, Int8Output& out) {
  const ConvShape& g = conv.shape;
  const int64_t plane = g.out_plane(), channels = g.out_channels;
  parallel_for(g.batch, plane * channels, [&](int64_t begin, int64_t end) {
    std::vector<float> block(static_cast<size_t>(plane * channels));
    for (int64_t n = begin; n < end; ++n) {
      transpose_scaled(sums + n * plane * channels, plane, channels, conv.scales, block.data());
      for (int64_t o = 0; o < channels; ++o) {
        float* values = block.data() + o * plane;
        finish_channel_run(conv, o, values, plane);
        out.store((n * channels + o) * plane, values, plane);
      }
    }
  });
}

// The values in NCHW in out.values(): the s32 sums oneDNN reordered there
// (`scale_sums`), or already scaled by the im2row path.
void finish_planes(const Int8Conv2d& conv, bool scale_sums, Int8Output& out) {
  const ConvShape& g = conv.shape;
  const int64_t plane = g.out_plane();
  float* v = out.values();
  parallel_for(g.batch * g.out_channels, plane, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row % g.out_channels;
      float* values = v + row * plane;
      if (scale_sums) {
        const float scale = conv.scales[o];
        for (int64_t q = 0; q < plane; ++q) {
          int32_t sum;  // read as s32 where oneDNN wrote it (memcpy: no aliasing of float and int32_t)
          std::memcpy(&sum, values + q, sizeof(sum));
          values[q] = static_cast<float>(sum) * scale;
        }
      }
      finish_channel_run(conv, o, values, plane);
      out.finish(row * plane, plane);
    }
  });
}

}  // namespace

void int8_conv2d(const Int8Conv2d& conv, const Tensor& y) {
  const ConvShape& g = conv.shape;
  MT_CHECK(g.groups == 1, "int8_conv2d: grouped convolutions are not supported (groups = {})", g.groups);
  MT_CHECK(y.is_contiguous() && (y.dtype() == kF32 || y.dtype() == kBF16 || y.dtype() == kU8) && y.dim() == 4 &&
               y.size(0) == g.batch && y.size(1) == g.out_channels && y.size(2) == g.out_h && y.size(3) == g.out_w,
           "int8_conv2d: y must be a contiguous f32, bf16 or u8 [{}, {}, {}, {}], got {} {}", g.batch, g.out_channels,
           g.out_h, g.out_w, y.dtype(), y.shape_string());
  MT_CHECK(conv.x_zero_point >= 0 && conv.x_zero_point <= 255, "int8_conv2d: a u8 zero point is in [0, 255], got {}",
           conv.x_zero_point);
  if (y.dtype() == kU8) check_requantization(conv.out_scale, conv.out_zero_point, "int8_conv2d");
  if (g.batch == 0 || g.out_plane() == 0 || g.out_channels == 0) return;
  Int8Output out(y, conv.out_scale, conv.out_zero_point);  // a u8 y: requantized a run at a time below
  // Reordered into NCHW, oneDNN writes the s32 sums into the f32 values' own
  // memory (both 4 bytes, so no second buffer of the output's size to fault
  // in); each element is then read as s32 and rewritten as f32 where it lies.
  static_assert(sizeof(int32_t) == sizeof(float));
  HostScratch<int32_t> channels_last;
  const Int8SumsLayout sums = onednn_int8_conv2d(
      conv, [&] { return reinterpret_cast<int32_t*>(out.values()); }, channels_last);
  if (sums == Int8SumsLayout::ChannelsLast) {
    finish_channels_last(conv, channels_last.get(), out);
  } else {
    if (sums == Int8SumsLayout::None) im2row_int8_conv2d(conv, out.values());  // scaled already
    finish_planes(conv, sums == Int8SumsLayout::Nchw, out);
  }
  out.commit();
}

}  // namespace mt::kernels::cpu
