// 2-D pooling over [planes, H, W] (planes = N*C): max pooling (with the argmax
// index), average pooling (optional padding), adaptive average pooling;
// forward and backward.
//
// What: the semantics of kernels/pool/cpu.cpp, which the tests compare
//   against: max windows clip to the input (padding never wins, the first of
//   equal values wins, NaN propagates); average windows divide by the padded
//   or the clipped size (count_include_pad); adaptive window i of n over size
//   covers [floor(i*size/n), ceil((i+1)*size/n)).
// Algorithm: every forward is one thread per output element, looping over its
//   window. Every backward is a GATHER, never a scatter, so no atomics and a
//   fixed summation order:
//   - avg / adaptive: one thread per input element finds the output windows
//     that cover it (a small range in each dim, computed in closed form),
//     sums dy / divisor over them in the CPU's order and stores once.
//   - max: the backward entry gets no window geometry (only dy, the argmax
//     indices and dx), so the covering windows are unknown. One block per
//     plane; thread t owns the input elements i with i % blockDim == t and
//     walks the plane's argmax list in output order, adding dy[o] when
//     indices[o] is one of its own. Each input has a single writer: no
//     atomics, and the same order as the CPU's scatter.
// Precision: window sums and gradient sums in f32 (f64 for f64); one rounding
//   on store. The max backward accumulates in an f32 workspace for f16/bf16.
// Bound: bandwidth-bound. The max backward reads the plane's index list once
//   per thread (broadcast reads, OH*OW iterations per thread): fine for the
//   small planes of CNN heads, wasteful for large early-layer planes — passing
//   the window to the backward would allow a per-input gather instead.
// Speed: not yet measured on a GPU.
#include <cmath>

#include "kernels/pool/api.h"
#include "kernels/common/element.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

using kernels::PoolShape;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

#define MT_GRID_STRIDE(i, total) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (total); i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
// floor(a / b) for b > 0 and any a.
__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

template <typename E>
__global__ void max_forward_kernel(const typename E::Storage* x, typename E::Storage* y, int64_t* indices,
                                   PoolShape s) {
  using Acc = typename E::Acc;
  MT_GRID_STRIDE(i, s.planes * s.out_h * s.out_w) {
    const int64_t ox = i % s.out_w, oy = (i / s.out_w) % s.out_h, p = i / (s.out_w * s.out_h);
    const int64_t h0 = max64(oy * s.stride_h - s.pad_h, 0), h1 = min64(oy * s.stride_h - s.pad_h + s.kernel_h, s.in_h);
    const int64_t w0 = max64(ox * s.stride_w - s.pad_w, 0), w1 = min64(ox * s.stride_w - s.pad_w + s.kernel_w, s.in_w);
    const typename E::Storage* xp = x + p * s.in_h * s.in_w;
    Acc best = -static_cast<Acc>(INFINITY);
    int64_t best_index = h0 * s.in_w + w0;
    bool is_nan = false;
    for (int64_t ih = h0; ih < h1 && !is_nan; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) {
        const Acc v = E::to_acc(xp[ih * s.in_w + iw]);
        if (v > best || v != v) {  // strictly greater keeps the first of equals; NaN wins and stops
          best = v;
          best_index = ih * s.in_w + iw;
          if (v != v) {
            is_nan = true;
            break;
          }
        }
      }
    }
    y[i] = E::from_acc(best);
    indices[i] = best_index;
  }
}

// One block per plane; thread t owns inputs i % blockDim.x == t.
template <typename E>
__global__ void max_backward_kernel(const typename E::Storage* dy, const int64_t* indices, typename E::Storage* dx,
                                    typename E::Acc* acc, PoolShape s) {
  using Acc = typename E::Acc;
  const int64_t p = blockIdx.x, in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w;
  const int64_t t = threadIdx.x, threads = blockDim.x;
  Acc* ap = acc + p * in_plane;
  for (int64_t i = t; i < in_plane; i += threads) ap[i] = Acc(0);
  const int64_t* ip = indices + p * out_plane;
  const typename E::Storage* gp = dy + p * out_plane;
  for (int64_t o = 0; o < out_plane; ++o) {
    const int64_t target = ip[o];
    if (target % threads == t) ap[target] += E::to_acc(gp[o]);
  }
  typename E::Storage* dp = dx + p * in_plane;
  for (int64_t i = t; i < in_plane; i += threads) dp[i] = E::from_acc(ap[i]);
}

// The average window of output (oy, ox): clipped bounds and divisor, as the CPU's for_each_avg_window.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

__device__ __forceinline__ AvgWindow avg_window(const PoolShape& s, int64_t oy, int64_t ox) {
  int64_t h0 = oy * s.stride_h - s.pad_h;
  int64_t h1 = min64(h0 + s.kernel_h, s.in_h + s.pad_h);
  const int64_t padded_h = h1 - h0;
  h0 = max64(h0, 0);
  h1 = min64(h1, s.in_h);
  int64_t w0 = ox * s.stride_w - s.pad_w;
  int64_t w1 = min64(w0 + s.kernel_w, s.in_w + s.pad_w);
  const int64_t padded_w = w1 - w0;
  w0 = max64(w0, 0);
  w1 = min64(w1, s.in_w);
  const int64_t divisor = s.count_include_pad ? padded_h * padded_w : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, divisor};
}

template <typename E>
__global__ void avg_forward_kernel(const typename E::Storage* x, typename E::Storage* y, PoolShape s) {
  using Acc = typename E::Acc;
  MT_GRID_STRIDE(i, s.planes * s.out_h * s.out_w) {
    const int64_t ox = i % s.out_w, oy = (i / s.out_w) % s.out_h, p = i / (s.out_w * s.out_h);
    const AvgWindow w = avg_window(s, oy, ox);
    const typename E::Storage* xp = x + p * s.in_h * s.in_w;
    Acc sum = 0;
    for (int64_t ih = w.h0; ih < w.h1; ++ih) {
      for (int64_t iw = w.w0; iw < w.w1; ++iw) sum += E::to_acc(xp[ih * s.in_w + iw]);
    }
    y[i] = E::from_acc(w.divisor > 0 ? sum / static_cast<Acc>(w.divisor) : Acc(0));
  }
}

// Input (ih, iw) lies in the windows oy in [lo, hi] (before clipping to the output).
__device__ __forceinline__ void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                         int64_t& lo, int64_t& hi) {
  lo = max64(floor_div(i + pad - kernel, stride) + 1, 0);  // o*stride - pad + kernel > i
  hi = min64(floor_div(i + pad, stride), out - 1);         // o*stride - pad <= i
}

template <typename E>
__global__ void avg_backward_kernel(const typename E::Storage* dy, typename E::Storage* dx, PoolShape s) {
  using Acc = typename E::Acc;
  MT_GRID_STRIDE(i, s.planes * s.in_h * s.in_w) {
    const int64_t iw = i % s.in_w, ih = (i / s.in_w) % s.in_h, p = i / (s.in_w * s.in_h);
    int64_t oy0, oy1, ox0, ox1;
    covering(ih, s.kernel_h, s.stride_h, s.pad_h, s.out_h, oy0, oy1);
    covering(iw, s.kernel_w, s.stride_w, s.pad_w, s.out_w, ox0, ox1);
    const typename E::Storage* gp = dy + p * s.out_h * s.out_w;
    Acc sum = 0;
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const AvgWindow w = avg_window(s, oy, ox);
        if (w.divisor == 0 || ih < w.h0 || ih >= w.h1 || iw < w.w0 || iw >= w.w1) continue;
        sum += E::to_acc(gp[oy * s.out_w + ox]) / static_cast<Acc>(w.divisor);
      }
    }
    dx[i] = E::from_acc(sum);
  }
}

__device__ __forceinline__ int64_t adaptive_start(int64_t i, int64_t size, int64_t n) { return i * size / n; }
__device__ __forceinline__ int64_t adaptive_end(int64_t i, int64_t size, int64_t n) {
  return ((i + 1) * size + n - 1) / n;
}

template <typename E>
__global__ void adaptive_forward_kernel(const typename E::Storage* x, typename E::Storage* y, PoolShape s) {
  using Acc = typename E::Acc;
  MT_GRID_STRIDE(i, s.planes * s.out_h * s.out_w) {
    const int64_t ox = i % s.out_w, oy = (i / s.out_w) % s.out_h, p = i / (s.out_w * s.out_h);
    const int64_t h0 = adaptive_start(oy, s.in_h, s.out_h), h1 = adaptive_end(oy, s.in_h, s.out_h);
    const int64_t w0 = adaptive_start(ox, s.in_w, s.out_w), w1 = adaptive_end(ox, s.in_w, s.out_w);
    const typename E::Storage* xp = x + p * s.in_h * s.in_w;
    Acc sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) sum += E::to_acc(xp[ih * s.in_w + iw]);
    }
    y[i] = E::from_acc(sum / static_cast<Acc>((h1 - h0) * (w1 - w0)));
  }
}

// The adaptive windows covering input position i: a contiguous range starting
// at or after floor(i*out/size) - 1.
__device__ __forceinline__ int64_t adaptive_first(int64_t i, int64_t size, int64_t out) {
  int64_t o = max64(i * out / size - 1, 0);
  while (o < out && adaptive_end(o, size, out) <= i) ++o;
  return o;
}

template <typename E>
__global__ void adaptive_backward_kernel(const typename E::Storage* dy, typename E::Storage* dx, PoolShape s) {
  using Acc = typename E::Acc;
  MT_GRID_STRIDE(i, s.planes * s.in_h * s.in_w) {
    const int64_t iw = i % s.in_w, ih = (i / s.in_w) % s.in_h, p = i / (s.in_w * s.in_h);
    const typename E::Storage* gp = dy + p * s.out_h * s.out_w;
    Acc sum = 0;
    for (int64_t oy = adaptive_first(ih, s.in_h, s.out_h); oy < s.out_h && adaptive_start(oy, s.in_h, s.out_h) <= ih;
         ++oy) {
      const int64_t rows = adaptive_end(oy, s.in_h, s.out_h) - adaptive_start(oy, s.in_h, s.out_h);
      for (int64_t ox = adaptive_first(iw, s.in_w, s.out_w); ox < s.out_w && adaptive_start(ox, s.in_w, s.out_w) <= iw;
           ++ox) {
        const int64_t cols = adaptive_end(ox, s.in_w, s.out_w) - adaptive_start(ox, s.in_w, s.out_w);
        sum += E::to_acc(gp[oy * s.out_w + ox]) / static_cast<Acc>(rows * cols);
      }
    }
    dx[i] = E::from_acc(sum);
  }
}

}  // namespace

void max_pool2d_forward(kernels::KernelDType dtype, const void* x, void* y, int64_t* indices, const PoolShape& s,
                        Stream stream) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  if (total == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("max_pool2d_forward_kernel", max_forward_kernel<E>, grid_for(total), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<Storage*>(y), indices, s);
  });
}

void max_pool2d_backward(kernels::KernelDType dtype, const void* dy, const int64_t* indices, void* dx,
                         void* acc_workspace, const PoolShape& s, Stream stream) {
  if (s.planes == 0 || s.in_h * s.in_w == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("max_pool2d_backward_kernel", max_backward_kernel<E>, dim3(static_cast<unsigned>(s.planes)), dim3(kThreads),
           0, stream, static_cast<const Storage*>(dy), indices, static_cast<Storage*>(dx),
           static_cast<typename E::Acc*>(acc_workspace), s);
  });
}

void avg_pool2d_forward(kernels::KernelDType dtype, const void* x, void* y, const PoolShape& s, Stream stream) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  if (total == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("avg_pool2d_forward_kernel", avg_forward_kernel<E>, grid_for(total), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<Storage*>(y), s);
  });
}

void avg_pool2d_backward(kernels::KernelDType dtype, const void* dy, void* dx, const PoolShape& s, Stream stream) {
  const int64_t total = s.planes * s.in_h * s.in_w;
  if (total == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("avg_pool2d_backward_kernel", avg_backward_kernel<E>, grid_for(total), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(dy), static_cast<Storage*>(dx), s);
  });
}

void adaptive_avg_pool2d_forward(kernels::KernelDType dtype, const void* x, void* y, const PoolShape& s,
                                 Stream stream) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  if (total == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("adaptive_avg_pool2d_forward_kernel", adaptive_forward_kernel<E>, grid_for(total), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<Storage*>(y), s);
  });
}

void adaptive_avg_pool2d_backward(kernels::KernelDType dtype, const void* dy, void* dx, const PoolShape& s,
                                  Stream stream) {
  const int64_t total = s.planes * s.in_h * s.in_w;
  if (total == 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    launch("adaptive_avg_pool2d_backward_kernel", adaptive_backward_kernel<E>, grid_for(total), dim3(kThreads), 0,
           stream, static_cast<const Storage*>(dy), static_cast<Storage*>(dx), s);
  });
}

}  // namespace mt::MT_KERNEL_NS

#undef MT_GRID_STRIDE
