// CPU pooling. Tensors are seen as [planes, H, W] (planes = every leading dim),
// loaded into contiguous compute buffers (f32 for f32/f16/bf16, f64 for f64;
// max-pool's backward copies bf16/f16 gradients as they are where no two
// windows overlap); OpenMP runs over the planes, which never share an
// output element.
#include "kernels/pool/cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/common/half_runs.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

struct Planes {
  int64_t count, h, w;
};

Planes planes_of(const Tensor& t) {
  MT_CHECK(t.dim() >= 2, "pool kernel: expected [..., H, W], got {}", t.shape_string());
  const int64_t h = t.size(-2), w = t.size(-1);
  return {h * w == 0 ? 0 : t.numel() / (h * w), h, w};
}

// The input rows [start, end) of pooling window o along one dim, before
// clipping.
struct Span {
  int64_t start, end;
};

// take ? a : b through an all-ones or all-zeros mask: no branch to mispredict.
template <typename T>
T select(bool take, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  const Bits mask = Bits{0} - static_cast<Bits>(take);
  return std::bit_cast<T>((std::bit_cast<Bits>(a) & mask) | (std::bit_cast<Bits>(b) & ~mask));
}

// Whether the window takes v over the best so far: strictly greater keeps the
// first of equal values; the first NaN wins and stays. Bit masks, not
// branches: on real activations `v > best` is a coin flip the branch
// predictor loses.
template <typename T>
bool takes(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

// One output row of windows that lie wholly inside the input (no padding):
// the window offsets run outermost and the output columns innermost, so the
// inner loop is the same select over a row of outputs and vectorises (this
// kernel, one window at a time, was 15-19% of a bf16 cnn step).
template <typename T>
void max_row_inside(const T* xp, int64_t in_w, const Pool2dWindow& k, int64_t oy, int64_t out_w, T* best,
                    int64_t* index) {
  for (int64_t ox = 0; ox < out_w; ++ox) {
    best[ox] = -std::numeric_limits<T>::infinity();
    index[ox] = oy * k.stride_h * in_w + ox * k.stride_w;
  }
  // The common stride 2 as a constant, so the compiler can vectorise its loads.
  const auto offset = [&](auto stride) {
    for (int64_t ki = 0; ki < k.kernel_h; ++ki) {
      const int64_t ih = oy * k.stride_h + ki;
      for (int64_t kj = 0; kj < k.kernel_w; ++kj) {
        const T* row = xp + ih * in_w + kj;
        const int64_t first = ih * in_w + kj;
        for (int64_t ox = 0; ox < out_w; ++ox) {
          const T v = row[ox * stride];
          const bool take = takes(v, best[ox]);
          best[ox] = take ? v : best[ox];
          index[ox] = take ? first + ox * stride : index[ox];
        }
      }
    }
  };
  if (k.stride_w == 2) {
    offset(std::integral_constant<int64_t, 2>());
  } else {
    offset(k.stride_w);
  }
}

// One window clipped to the input (padding never wins).
template <typename T>
void max_window(const T* xp, const Planes& in, const Pool2dWindow& k, int64_t oy, int64_t ox, T& best, int64_t& index) {
  const int64_t h0 = std::max<int64_t>(oy * k.stride_h - k.pad_h, 0);
  const int64_t h1 = std::min(oy * k.stride_h - k.pad_h + k.kernel_h, in.h);
  const int64_t w0 = std::max<int64_t>(ox * k.stride_w - k.pad_w, 0);
  const int64_t w1 = std::min(ox * k.stride_w - k.pad_w + k.kernel_w, in.w);
  best = -std::numeric_limits<T>::infinity();
  index = h0 * in.w + w0;
  for (int64_t ih = h0; ih < h1; ++ih) {
    for (int64_t iw = w0; iw < w1; ++iw) {
      const T v = xp[ih * in.w + iw];
      const bool take = takes(v, best);
      best = select(take, v, best);
      index = select(take, ih * in.w + iw, index);
    }
  }
}

// Windows that tile the plane (kernel == stride, no padding) and whose rows
// divide the input's width: the common 2x2 / stride 2. Then the plane's row
// segments of kernel_w values follow one another without a gap, so the
// horizontal step is one long loop over the whole plane (h[t] = the best of
// x[kw t .. kw t + kw)) that vectorises, however short the rows are; the
// vertical step then takes the best of kernel_h such values per output.
// Scanning a window's rows top to bottom and each row left to right, first
// strict winner kept, is the raster order max_window scans in, so ties and
// NaNs pick the same element. Row by row, max_row_inside spent most of its
// time in loop prologues on 7- and 14-wide rows (2.4 ms for the cnn's
// 128 x 64 x 14 x 14 bf16 pool, 15x a ReLU of twice its size).
bool tiles_plane(const Planes& in, const Pool2dWindow& k) {
  return k.pad_h == 0 && k.pad_w == 0 && k.kernel_h == k.stride_h && k.kernel_w == k.stride_w && in.w % k.kernel_w == 0;
}

template <typename T>
void max_plane_tiled(const T* __restrict xp, const Planes& out, const Pool2dWindow& k, T* __restrict best_h,
                     int32_t* __restrict index_h, T* __restrict yp, int64_t* __restrict ip) {
  const int64_t kw = k.kernel_w, kh = k.kernel_h;
  const int64_t segments = kh * out.h * out.w;  // the rows the windows read, in kw-wide segments
  for (int64_t t = 0; t < segments; ++t) {
    best_h[t] = xp[kw * t];
    index_h[t] = static_cast<int32_t>(kw * t);
  }
  for (int64_t j = 1; j < kw; ++j) {
    for (int64_t t = 0; t < segments; ++t) {
      const T v = xp[kw * t + j];
      const bool take = takes(v, best_h[t]);
      best_h[t] = take ? v : best_h[t];
      index_h[t] = take ? static_cast<int32_t>(kw * t + j) : index_h[t];
    }
  }
  for (int64_t oy = 0; oy < out.h; ++oy) {
    T* best = yp + oy * out.w;
    int64_t* index = ip + oy * out.w;
    const T* first = best_h + kh * oy * out.w;
    const int32_t* first_index = index_h + kh * oy * out.w;
    for (int64_t ox = 0; ox < out.w; ++ox) {
      best[ox] = first[ox];
      index[ox] = first_index[ox];
    }
    for (int64_t i = 1; i < kh; ++i) {
      const T* row = first + i * out.w;
      const int32_t* row_index = first_index + i * out.w;
      for (int64_t ox = 0; ox < out.w; ++ox) {
        const bool take = takes(row[ox], best[ox]);
        best[ox] = take ? row[ox] : best[ox];
        index[ox] = take ? row_index[ox] : index[ox];
      }
    }
  }
}

// takes(v, best) on eight lanes: v > best, or v is the first NaN.
__m256 takes8(__m256 v, __m256 best) {
  const __m256 nan_over_number =
      _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q));
  return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), nan_over_number);
}

// The first n of eight lanes into dst. No masked store: AMD's vmaskmovps
// store is microcoded, and it was a third of an f32 2 x 2 pool's time. A
// maximum is one of the inputs, so a bf16 plane's winners are bf16 values:
// truncating their f32 bits back is exact (NaN payloads too).
void store_lanes(__m256 v, int64_t n, float* dst) {
  if (n == 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (int64_t i = 0; i < n; ++i) dst[i] = lanes[i];
}
void store_lanes(__m256 v, int64_t n, BFloat16* dst) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_castps_si256(v));
  for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16::from_bits(static_cast<uint16_t>(lanes[i] >> 16));
}
// An f16 winner narrows back exactly; a NaN comes out as the canonical
// 0x7fff, as the general path's rounding gives it.
void store_lanes(__m256 v, int64_t n, Half* dst) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  Half narrowed[8];
  narrow_f16x8(lanes, narrowed);
  std::copy_n(narrowed, n, dst);
}

// max_plane_tiled for the 2 x 2 window, eight lanes at a time (GCC leaves
// the NaN-aware selects of the generic loops scalar), on f32 planes or on
// bf16 or f16 planes read and written where they lie (a bf16 cnn's pools spent as
// long widening and narrowing whole planes as pooling them). Horizontal: 16
// values, split into even and odd columns, give 8 segments' winners (f32
// scratch). Vertical: output row oy is the winner of segment rows 2oy and
// 2oy + 1, masked at the row's end.
template <typename S>
void max_plane_2x2(const S* __restrict xp, const Planes& out, float* __restrict best_h, int32_t* __restrict index_h,
                   S* __restrict yp, int64_t* __restrict ip) {
  const int64_t segments = 2 * out.h * out.w;
  const __m256i lane = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  int64_t t = 0;
  for (; t + 8 <= segments; t += 8) {
    const __m256 lo = load_f32x8(xp + 2 * t), hi = load_f32x8(xp + 2 * t + 8);
    // shuffle_ps works per 128-bit half; permute4x64 puts the halves in order.
    const __m256 even =
        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    const __m256 odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
    const __m256 take = takes8(odd, even);
    _mm256_storeu_ps(best_h + t, _mm256_blendv_ps(even, odd, take));
    const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(2 * t)), lane);
    const __m256i one_if_odd = _mm256_srli_epi32(_mm256_castps_si256(take), 31);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(index_h + t), _mm256_add_epi32(first, one_if_odd));
  }
  for (; t < segments; ++t) {
    const float left = static_cast<float>(xp[2 * t]), right = static_cast<float>(xp[2 * t + 1]);
    const bool take = takes(right, left);
    best_h[t] = take ? right : left;
    index_h[t] = static_cast<int32_t>(2 * t + take);
  }
  for (int64_t oy = 0; oy < out.h; ++oy) {
    const float* upper = best_h + 2 * oy * out.w;
    const float* lower = upper + out.w;
    const int32_t* upper_index = index_h + 2 * oy * out.w;
    const int32_t* lower_index = upper_index + out.w;
    for (int64_t ox = 0; ox < out.w; ox += 8) {
      const int64_t n = std::min<int64_t>(8, out.w - ox);
      const __m256i mask =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 a = _mm256_maskload_ps(upper + ox, mask), b = _mm256_maskload_ps(lower + ox, mask);
      const __m256i ia = _mm256_maskload_epi32(upper_index + ox, mask);
      const __m256i ib = _mm256_maskload_epi32(lower_index + ox, mask);
      const __m256 take = takes8(b, a);
      store_lanes(_mm256_blendv_ps(a, b, take), n, yp + oy * out.w + ox);
      const __m256i index =
          _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(ia), _mm256_castsi256_ps(ib), take));
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), index);
      for (int64_t i = 0; i < n; ++i) ip[oy * out.w + ox + i] = lanes[i];
    }
  }
}

template <typename T>
void max_forward(const Tensor& x, const Pool2dWindow& k, const Tensor& y, const Tensor& indices) {
  const Planes in = planes_of(x), out = planes_of(y);
  const int64_t in_plane = in.h * in.w, out_plane = out.h * out.w;
  const RowReader<T> rx(x, in_plane);
  RowWriter<T> wy(y, out_plane);
  // Without `indices` (inference: no backward will read them) each plane's
  // winners go to a per-thread row that stays in L1; written out they were
  // twice the bytes of y (i64 against f32) and half of a no-grad pool's time.
  std::optional<OutputBuffer<int64_t>> vi;
  if (indices.defined()) vi.emplace(indices);
  const bool inside = k.pad_h == 0 && k.pad_w == 0;
  const bool tiled = tiles_plane(in, k) && in_plane <= std::numeric_limits<int32_t>::max();
  const bool two_by_two = tiled && k.kernel_h == 2 && k.kernel_w == 2;
  const bool half_planes =
      (x.dtype() == kBF16 || x.dtype() == kF16) && y.dtype() == x.dtype() && x.is_contiguous() && y.is_contiguous();
  parallel_for(in.count, 4 * out_plane, [&](int64_t begin, int64_t end) {
    std::vector<T> x_buffer(static_cast<size_t>(in_plane)), y_buffer(static_cast<size_t>(out_plane));
    const size_t segments = tiled ? static_cast<size_t>(k.kernel_h * out_plane) : 0;
    std::vector<T> best_h(segments);
    std::vector<int32_t> index_h(segments);
    std::vector<int64_t> unused_indices(vi ? 0 : static_cast<size_t>(out_plane));
    for (int64_t p = begin; p < end; ++p) {
      int64_t* ip = vi ? vi->data() + p * out_plane : unused_indices.data();
      if constexpr (std::is_same_v<T, float>) {
        if (two_by_two && half_planes) {
          const auto pool_plane = [&](auto storage) {  // storage: a Half or BFloat16, for its type
            using S = decltype(storage);
            max_plane_2x2(static_cast<const S*>(x.data_ptr()) + p * in_plane, out, best_h.data(), index_h.data(),
                          static_cast<S*>(y.data_ptr()) + p * out_plane, ip);
          };
          x.dtype() == kF16 ? pool_plane(Half()) : pool_plane(BFloat16());
          continue;
        }
      }
      const T* xp = rx.row(p, x_buffer.data());
      T* yp = wy.row(p, y_buffer.data());
      if constexpr (std::is_same_v<T, float>) {
        if (two_by_two) {
          max_plane_2x2(xp, out, best_h.data(), index_h.data(), yp, ip);
          wy.finish_row(p, yp);
          continue;
        }
      }
      if (tiled) {
        max_plane_tiled(xp, out, k, best_h.data(), index_h.data(), yp, ip);
        wy.finish_row(p, yp);
        continue;
      }
      for (int64_t oy = 0; oy < out.h; ++oy) {
        const int64_t o = oy * out.w;
        if (inside) {
          max_row_inside(xp, in.w, k, oy, out.w, yp + o, ip + o);
          continue;
        }
        for (int64_t ox = 0; ox < out.w; ++ox) max_window(xp, in, k, oy, ox, yp[o + ox], ip[o + ox]);
      }
      wy.finish_row(p, yp);
    }
  });
  wy.commit();
  if (vi) vi->commit();
}

// The 2 x 2 tiling pool of one u8 plane, as max_plane_2x2 does f32: the
// horizontal pairs over the whole plane at once (32 at a time: the pair's
// maximum in each 16-bit lane's low byte, packed), then the vertical pairs.
void max_plane_2x2_u8(const uint8_t* __restrict x, const Planes& in, const Planes& out, uint8_t* __restrict pairs,
                      uint8_t* __restrict y) {
  const int64_t segments = in.h * out.w;
  const __m256i low_bytes = _mm256_set1_epi16(0x00ff);
  int64_t t = 0;
  for (; t + 32 <= segments; t += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2 * t));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2 * t + 32));
    const __m256i ha = _mm256_and_si256(_mm256_max_epu8(a, _mm256_srli_epi16(a, 8)), low_bytes);
    const __m256i hb = _mm256_and_si256(_mm256_max_epu8(b, _mm256_srli_epi16(b, 8)), low_bytes);
    // packus works per 128-bit half: a's and b's halves interleave; permute puts them in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(ha, hb), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + t), packed);
  }
  for (; t < segments; ++t) pairs[t] = std::max(x[2 * t], x[2 * t + 1]);
  for (int64_t oy = 0; oy < out.h; ++oy) {
    const uint8_t* upper = pairs + 2 * oy * out.w;
    const uint8_t* lower = upper + out.w;
    for (int64_t ox = 0; ox < out.w; ++ox) y[oy * out.w + ox] = std::max(upper[ox], lower[ox]);
  }
}

// u8 planes (an INT8 chain's activations, no gradient: no indices), each
// window's maximum over its clipped extent. Padding never wins, as above;
// with integers there are no NaNs and ties do not matter for the values.
void max_forward_u8(const Tensor& x, const Pool2dWindow& k, const Tensor& y, const Tensor& indices) {
  MT_CHECK(!indices.defined(), "max_pool2d: u8 planes pool without indices (they have no gradient)");
  MT_CHECK(x.is_contiguous() && y.is_contiguous() && y.dtype() == kU8, "max_pool2d: u8 planes must be contiguous");
  const Planes in = planes_of(x), out = planes_of(y);
  const auto* src = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(y.data_ptr());
  const bool two_by_two = tiles_plane(in, k) && k.kernel_h == 2 && k.kernel_w == 2;
  parallel_for(in.count, 4 * out.h * out.w, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> pairs(two_by_two ? static_cast<size_t>(in.h * out.w) : 0);
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* __restrict plane = src + p * in.h * in.w;
      uint8_t* __restrict best = dst + p * out.h * out.w;
      if (two_by_two) {
        max_plane_2x2_u8(plane, in, out, pairs.data(), best);
        continue;
      }
      for (int64_t oy = 0; oy < out.h; ++oy) {
        const int64_t h0 = std::max<int64_t>(oy * k.stride_h - k.pad_h, 0);
        const int64_t h1 = std::min(oy * k.stride_h - k.pad_h + k.kernel_h, in.h);
        for (int64_t ox = 0; ox < out.w; ++ox) {
          const int64_t w0 = std::max<int64_t>(ox * k.stride_w - k.pad_w, 0);
          const int64_t w1 = std::min(ox * k.stride_w - k.pad_w + k.kernel_w, in.w);
          uint8_t m = 0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) m = std::max(m, plane[ih * in.w + iw]);
          }
          best[oy * out.w + ox] = m;
        }
      }
    }
  });
  y.storage()->bump_version();
}

template <typename T>
void max_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const Planes in = planes_of(dx), out = planes_of(dy);
  const int64_t in_plane = in.h * in.w, out_plane = out.h * out.w;
  const RowReader<T> rdy(dy, out_plane);
  const Loaded<int64_t> vi(indices);
  RowWriter<T> wdx(dx, in_plane);
  parallel_for(in.count, 4 * out_plane, [&](int64_t begin, int64_t end) {
    std::vector<T> dy_buffer(static_cast<size_t>(out_plane)), dx_buffer(static_cast<size_t>(in_plane));
    for (int64_t p = begin; p < end; ++p) {
      const T* dyp = rdy.row(p, dy_buffer.data());
      const int64_t* ip = vi.data() + p * out_plane;
      T* dxp = wdx.row(p, dx_buffer.data());
      std::fill(dxp, dxp + in_plane, T(0));
      for (int64_t o = 0; o < out_plane; ++o) dxp[ip[o]] += dyp[o];
      wdx.finish_row(p, dxp);
    }
  });
  wdx.commit();
}

// Windows that share no input element (kernel <= stride both ways: the
// cnn's 2 x 2 / 2): each input element then takes at most one output's
// gradient.
bool windows_apart(const Pool2dWindow& k) { return k.kernel_h <= k.stride_h && k.kernel_w <= k.stride_w; }

bool copies_16_bit_gradients(const Tensor& dy, const Tensor& dx) {
  return (dx.dtype() == kBF16 || dx.dtype() == kF16) && dy.dtype() == dx.dtype() && dy.is_contiguous() &&
         dx.is_contiguous();
}

// The bits max_backward stores for a gradient g that lands alone on its
// input element: 0 + g, rounded back (exact), so -0 becomes +0 and a NaN
// the canonical 0x7fff that mixtape's narrowing gives both formats;
// anything else is g itself.
uint16_t alone_gradient_bits(uint16_t g, uint16_t infinity) {
  if (g == 0x8000) return 0;
  return (g & 0x7fff) > infinity ? uint16_t{0x7fff} : g;
}

// max_backward for bf16 or f16 gradients of windows that share no input
// element: every input element is 0 or one output's gradient, so the 16-bit
// values are copied to their places, with max_backward's bits, instead of
// widened into an f32 plane, added to zeros and rounded back (bf16
// max-pool backward took longer than its f32 form in a cnn step's perf).
void max_backward_16_bit(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const Planes in = planes_of(dx), out = planes_of(dy);
  const int64_t in_plane = in.h * in.w, out_plane = out.h * out.w;
  const uint16_t infinity = dx.dtype() == kF16 ? 0x7c00 : 0x7f80;
  const auto* g = static_cast<const uint16_t*>(dy.data_ptr());
  auto* d = static_cast<uint16_t*>(dx.data_ptr());
  const Loaded<int64_t> vi(indices);
  parallel_for(in.count, 2 * out_plane, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint16_t* gp = g + p * out_plane;
      const int64_t* ip = vi.data() + p * out_plane;
      uint16_t* dp = d + p * in_plane;
      std::fill(dp, dp + in_plane, uint16_t{0});
      for (int64_t o = 0; o < out_plane; ++o) dp[ip[o]] = alone_gradient_bits(gp[o], infinity);
    }
  });
  dx.storage()->bump_version();
}

// Calls fn(out_index, h0, h1, w0, w1, divisor) for every average-pooling window
// of a plane.
template <typename Fn>
void for_each_avg_window(const Planes& in, const Planes& out, const Pool2dWindow& k, Fn&& fn) {
  for (int64_t oy = 0; oy < out.h; ++oy) {
    int64_t h0 = oy * k.stride_h - k.pad_h;
    int64_t h1 = std::min(h0 + k.kernel_h, in.h + k.pad_h);
    const int64_t padded_h = h1 - h0;
    h0 = std::max<int64_t>(h0, 0);
    h1 = std::min(h1, in.h);
    for (int64_t ox = 0; ox < out.w; ++ox) {
      int64_t w0 = ox * k.stride_w - k.pad_w;
      int64_t w1 = std::min(w0 + k.kernel_w, in.w + k.pad_w);
      const int64_t padded_w = w1 - w0;
      w0 = std::max<int64_t>(w0, 0);
      w1 = std::min(w1, in.w);
      const int64_t divisor = k.count_include_pad ? padded_h * padded_w : (h1 - h0) * (w1 - w0);
      fn(oy * out.w + ox, h0, h1, w0, w1, divisor);
    }
  }
}

// Adaptive window i of n over size: [floor(i*size/n), ceil((i+1)*size/n)).
inline Span adaptive_span(int64_t i, int64_t size, int64_t n) { return {i * size / n, ((i + 1) * size + n - 1) / n}; }

// Adaptive pooling's windows, in the same form as for_each_avg_window's.
template <typename Fn>
void for_each_adaptive_window(const Planes& in, const Planes& out, Fn&& fn) {
  for (int64_t oy = 0; oy < out.h; ++oy) {
    const Span sh = adaptive_span(oy, in.h, out.h);
    for (int64_t ox = 0; ox < out.w; ++ox) {
      const Span sw = adaptive_span(ox, in.w, out.w);
      fn(oy * out.w + ox, sh.start, sh.end, sw.start, sw.end, (sh.end - sh.start) * (sw.end - sw.start));
    }
  }
}

// Average and adaptive-average pooling share one forward and one backward:
// the mean over each window, with for_each_window(in, out, fn) naming the windows.
template <typename T, typename Windows>
void mean_pool_forward(const Tensor& x, const Tensor& y, Windows&& for_each_window) {
  const Planes in = planes_of(x), out = planes_of(y);
  const Loaded<T> vx(x);
  OutputBuffer<T> vy(y);
  T* py = vy.data();
  parallel_for(in.count, 4 * out.h * out.w, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* xp = vx.data() + p * in.h * in.w;
      T* yp = py + p * out.h * out.w;
      for_each_window(in, out, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t div) {
        T s = 0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) s += xp[ih * in.w + iw];
        }
        yp[o] = div > 0 ? s / static_cast<T>(div) : T(0);
      });
    }
  });
  vy.commit();
}

template <typename T, typename Windows>
void mean_pool_backward(const Tensor& dy, const Tensor& dx, Windows&& for_each_window) {
  const Planes in = planes_of(dx), out = planes_of(dy);
  const Loaded<T> vdy(dy);
  OutputBuffer<T> vdx(dx);
  T* pdx = vdx.data();
  std::fill(pdx, pdx + dx.numel(), T(0));
  parallel_for(in.count, 4 * out.h * out.w, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* dxp = pdx + p * in.h * in.w;
      const T* dyp = vdy.data() + p * out.h * out.w;
      for_each_window(in, out, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t div) {
        if (div == 0) return;
        const T g = dyp[o] / static_cast<T>(div);
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) dxp[ih * in.w + iw] += g;
        }
      });
    }
  });
  vdx.commit();
}

}  // namespace

void max_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y, const Tensor& indices) {
  if (x.dtype() == kU8) return max_forward_u8(x, window, y, indices);
  if (x.dtype() == kF64) return max_forward<double>(x, window, y, indices);
  max_forward<float>(x, window, y, indices);
}
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2dWindow& window, const Tensor& dx) {
  if (dx.dtype() == kF64) return max_backward<double>(dy, indices, dx);
  if (windows_apart(window) && copies_16_bit_gradients(dy, dx)) return max_backward_16_bit(dy, indices, dx);
  max_backward<float>(dy, indices, dx);
}
void avg_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y) {
  auto windows = [&](const Planes& in, const Planes& out, auto&& fn) { for_each_avg_window(in, out, window, fn); };
  if (x.dtype() == kF64) return mean_pool_forward<double>(x, y, windows);
  mean_pool_forward<float>(x, y, windows);
}
void avg_pool2d_backward(const Tensor& dy, const Pool2dWindow& window, const Tensor& dx) {
  auto windows = [&](const Planes& in, const Planes& out, auto&& fn) { for_each_avg_window(in, out, window, fn); };
  if (dx.dtype() == kF64) return mean_pool_backward<double>(dy, dx, windows);
  mean_pool_backward<float>(dy, dx, windows);
}
void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  auto windows = [](const Planes& in, const Planes& out, auto&& fn) { for_each_adaptive_window(in, out, fn); };
  if (x.dtype() == kF64) return mean_pool_forward<double>(x, y, windows);
  mean_pool_forward<float>(x, y, windows);
}
void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  auto windows = [](const Planes& in, const Planes& out, auto&& fn) { for_each_adaptive_window(in, out, fn); };
  if (dx.dtype() == kF64) return mean_pool_backward<double>(dy, dx, windows);
  mean_pool_backward<float>(dy, dx, windows);
}

}  // namespace mt::kernels::cpu
