// CPU conv2d: oneDNN's convolution where it takes the case
// (kernels/conv/onednn.cpp, MT_CPU_GEMM), else im2col + GEMM (Eigen), OpenMP
// over the batch, described here.
//
// For each sample n and group g the receptive fields are unrolled into
// col [K = C/groups*KH*KW, L = OH*OW] (row (c, ki, kj), column (oy, ox)), and
//   y[n, g] = W_g [O/groups, K] @ col                      (forward)
//   dW_g   += dy[n, g] @ col^T                             (weight gradient)
//   dx[n]  += col2im(W_g^T @ dy[n, g])                     (input gradient)
// im2col/col2im work row by row: for each (c, ki, kj) and output row oy the
// valid ox range is computed once, so the inner loop is a copy (a memcpy at
// stride 1) with no bounds tests. A 1x1, stride-1, unpadded convolution skips
// im2col entirely (col is x itself).
//
// f32/f16/bf16 compute in f32 (f16/bf16 are converted once on load and
// rounded once on store), f64 in f64. Each thread owns its col buffer; the
// weight gradient is summed over fixed batch chunks in a fixed order, so
// results do not depend on the thread count.
#include "kernels/conv/cpu.h"

#include <Eigen/Core>
#include <cstring>
#include <optional>

#include "kernels/common/lane_sum.h"
#include "kernels/common/strided.h"
#include "kernels/conv/onednn.h"

namespace mt::kernels::cpu {
namespace {

constexpr int64_t kWeightGradChunks = 8;

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatMap = Eigen::Map<RowMajor<T>>;
template <typename T>
using ConstMatMap = Eigen::Map<const RowMajor<T>>;

// The output positions [lo, hi) whose input position o*stride + offset lies in
// [0, size).
inline void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - 1 - offset;
  hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  lo = std::min(lo, hi);
}

bool is_pointwise(const ConvShape& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// x: one group of one sample [C/groups, H, W]; col: [K, OH*OW].
template <typename T>
void im2col(const T* x, const ConvShape& g, int64_t channels, T* col) {
  const int64_t H = g.in_h, W = g.in_w, OH = g.out_h, OW = g.out_w, L = OH * OW;
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * H * W;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * L;
        const int64_t off_w = kj * g.dilation_w - g.pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(off_w, g.stride_w, W, OW, lo, hi);
        for (int64_t oy = 0; oy < OH; ++oy) {
          T* r = row + oy * OW;
          const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dilation_h;
          if (iy < 0 || iy >= H) {
            std::fill(r, r + OW, T(0));
            continue;
          }
          const T* src = xc + iy * W + off_w;
          std::fill(r, r + lo, T(0));
          if (g.stride_w == 1) {
            std::memcpy(r + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(T));
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) r[ox] = src[ox * g.stride_w];
          }
          std::fill(r + hi, r + OW, T(0));
        }
      }
    }
  }
}

// The adjoint of im2col: dx [C/groups, H, W] += fold(col).
template <typename T>
void col2im(const T* col, const ConvShape& g, int64_t channels, T* dx) {
  const int64_t H = g.in_h, W = g.in_w, OH = g.out_h, OW = g.out_w, L = OH * OW;
  for (int64_t c = 0; c < channels; ++c) {
    T* dxc = dx + c * H * W;
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const T* row = col + ((c * g.kernel_h + ki) * g.kernel_w + kj) * L;
        const int64_t off_w = kj * g.dilation_w - g.pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(off_w, g.stride_w, W, OW, lo, hi);
        for (int64_t oy = 0; oy < OH; ++oy) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dilation_h;
          if (iy < 0 || iy >= H) continue;
          const T* r = row + oy * OW;
          T* dst = dxc + iy * W + off_w;
          for (int64_t ox = lo; ox < hi; ++ox) dst[ox * g.stride_w] += r[ox];
        }
      }
    }
  }
}

template <typename T>
void forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& g, const Tensor& y) {
  const Loaded<T> vx(x), vw(weight);
  std::optional<Loaded<T>> vb;
  if (bias.defined()) vb.emplace(bias);
  T* out = direct_output<T>(y);
  std::vector<T> scratch;
  if (out == nullptr) {
    scratch.resize(static_cast<size_t>(y.numel()));
    out = scratch.data();
  }
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  const int64_t K = cg * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w, HW = g.in_h * g.in_w;
  const bool pointwise = is_pointwise(g);
  parallel_for(g.batch, K * L * g.out_channels, [&](int64_t begin, int64_t end) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(K * L));
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* xg = vx.data() + (n * g.in_channels + grp * cg) * HW;
        const T* colp = xg;
        if (!pointwise) {
          im2col(xg, g, cg, col.data());
          colp = col.data();
        }
        T* yg = out + (n * g.out_channels + grp * og) * L;
        MatMap<T> Y(yg, og, L);
        Y.noalias() = ConstMatMap<T>(vw.data() + grp * og * K, og, K) * ConstMatMap<T>(colp, K, L);
        if (vb) {
          for (int64_t o = 0; o < og; ++o) Y.row(o).array() += (*vb)[grp * og + o];
        }
      }
    }
  });
  if (scratch.empty()) {
    y.storage()->bump_version();
  } else {
    store(out, y);
  }
}

// dbias = the sum of dy over the batch and the output plane: each (n, o)
// plane by sum_of (lane_sum.h: f32 blocks totalled in double), in parallel
// and in memory order, then each channel over its planes in order in double
// (the same bits on any thread count). It reads dy where it lies (bf16
// and f16 planes eight lanes at a time, with_rows): one scalar chain over a
// whole f32 copy of dy was 8% of a bf16 cnn step, and the copy (made even
// when oneDNN computes the other gradients) 3% more.
template <typename T>
void bias_gradient(const Tensor& dy, const ConvShape& g, const Tensor& dbias) {
  const int64_t L = g.out_h * g.out_w, planes = g.batch * g.out_channels;
  std::vector<double> plane_sums(static_cast<size_t>(planes));
  with_rows<T>(std::array{&dy}, Tensor(), [&](const auto& in, auto*) {
    parallel_for(planes, L, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        plane_sums[static_cast<size_t>(plane)] = sum_of(in[0] + plane * L, L);
      }
    });
  });
  std::vector<T> db(static_cast<size_t>(g.out_channels));
  for (int64_t o = 0; o < g.out_channels; ++o) {
    double s = 0;
    for (int64_t n = 0; n < g.batch; ++n) s += plane_sums[static_cast<size_t>(n * g.out_channels + o)];
    db[static_cast<size_t>(o)] = static_cast<T>(s);
  }
  store(db.data(), dbias);
}

// What the Eigen backward of one sample reads and writes: x is null
// without a weight gradient, weight and dx without an input gradient.
template <typename T>
struct BackwardOperands {
  const ConvShape& g;
  const T *dy, *x, *weight;
  T* dx;
  int64_t cg, og, K, L, HW;
  bool pointwise;
};

// Sample n's share of the gradients, group by group: dw += dy col(x)^T, and
// dx = col2im(weight^T dy) (written straight into dx when pointwise). `col`
// is the caller's K x L scratch (empty when pointwise).
template <typename T>
void sample_backward(const BackwardOperands<T>& o, int64_t n, std::vector<T>& col, T* dw) {
  const ConvShape& g = o.g;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const ConstMatMap<T> DY(o.dy + (n * g.out_channels + grp * o.og) * o.L, o.og, o.L);
    if (o.x != nullptr) {
      const T* xg = o.x + (n * g.in_channels + grp * o.cg) * o.HW;
      const T* colp = xg;
      if (!o.pointwise) {
        im2col(xg, g, o.cg, col.data());
        colp = col.data();
      }
      MatMap<T> DW(dw + grp * o.og * o.K, o.og, o.K);
      DW.noalias() += DY * ConstMatMap<T>(colp, o.K, o.L).transpose();
    }
    if (o.dx != nullptr) {
      const ConstMatMap<T> Wg(o.weight + grp * o.og * o.K, o.og, o.K);
      T* dxg = o.dx + (n * g.in_channels + grp * o.cg) * o.HW;
      if (o.pointwise) {
        MatMap<T>(dxg, o.K, o.L).noalias() = Wg.transpose() * DY;
      } else {
        MatMap<T> DCOL(col.data(), o.K, o.L);
        DCOL.noalias() = Wg.transpose() * DY;
        col2im(col.data(), g, o.cg, dxg);
      }
    }
  }
}

template <typename T>
void backward_typed(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& g, const Tensor& dx,
                    const Tensor& dweight, const Tensor& dbias) {
  if (dbias.defined()) bias_gradient<T>(dy, g, dbias);
  if (!dx.defined() && !dweight.defined()) return;
  if (onednn_conv2d_backward(dy, x, weight, g, dx, dweight)) return;

  const Loaded<T> vdy(dy);
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  const int64_t K = cg * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const bool pointwise = is_pointwise(g);

  std::optional<Loaded<T>> vx, vw;
  if (dweight.defined()) vx.emplace(x);
  if (dx.defined()) vw.emplace(weight);
  T* dx_out = nullptr;
  std::vector<T> dx_scratch;
  if (dx.defined()) {
    dx_out = direct_output<T>(dx);
    if (dx_out == nullptr) {
      dx_scratch.resize(static_cast<size_t>(dx.numel()));
      dx_out = dx_scratch.data();
    }
    if (!pointwise) std::fill(dx_out, dx_out + dx.numel(), T(0));
  }
  const BackwardOperands<T> operands{.g = g,
                                     .dy = vdy.data(),
                                     .x = vx ? vx->data() : nullptr,
                                     .weight = vw ? vw->data() : nullptr,
                                     .dx = dx_out,
                                     .cg = cg,
                                     .og = og,
                                     .K = K,
                                     .L = L,
                                     .HW = g.in_h * g.in_w,
                                     .pointwise = pointwise};
  // The batch is cut into a fixed number of chunks, whatever the thread
  // count; each chunk sums its samples' weight gradients in order, and the
  // chunks' partials are added in chunk order, so dW is bit-identical on 1 or
  // 16 threads. (The price: at most kWeightGradChunks threads here, and one
  // partial dW per chunk in memory.)
  const int64_t chunks = std::min(g.batch, kWeightGradChunks);
  const int64_t wnumel = g.out_channels * K;
  std::vector<std::vector<T>> dw_partials(static_cast<size_t>(dweight.defined() ? chunks : 0));
  const int64_t work_per_chunk = (g.batch / std::max<int64_t>(chunks, 1)) * K * L * g.out_channels * 2;

  parallel_for(chunks, work_per_chunk, [&](int64_t first_chunk, int64_t end_chunk) {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(K * L));
    for (int64_t chunk = first_chunk; chunk < end_chunk; ++chunk) {
      std::vector<T> dw_local(dweight.defined() ? static_cast<size_t>(wnumel) : 0, T(0));
      for (int64_t n = chunk * g.batch / chunks; n < (chunk + 1) * g.batch / chunks; ++n) {
        sample_backward(operands, n, col, dw_local.data());
      }
      if (dweight.defined()) dw_partials[static_cast<size_t>(chunk)] = std::move(dw_local);
    }
  });

  if (dweight.defined()) {
    std::vector<T> dw(static_cast<size_t>(wnumel), T(0));
    for (const std::vector<T>& part : dw_partials) {
      for (int64_t i = 0; i < wnumel; ++i) dw[static_cast<size_t>(i)] += part[static_cast<size_t>(i)];
    }
    store(dw.data(), dweight);
  }
  if (dx.defined()) {
    if (dx_scratch.empty()) {
      dx.storage()->bump_version();
    } else {
      store(dx_out, dx);
    }
  }
}

// x may be undefined (a backward that needs no weight gradient does not keep it).
void check_geometry(const Tensor& x, const Tensor& y, const ConvShape& g) {
  MT_CHECK((!x.defined() || x.sizes() == Shape({g.batch, g.in_channels, g.in_h, g.in_w})) &&
               y.sizes() == Shape({g.batch, g.out_channels, g.out_h, g.out_w}),
           "conv2d kernel: x {} / y {} do not match the geometry", x.defined() ? x.shape_string() : "(none)",
           y.shape_string());
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShape& geometry,
                    const Tensor& y) {
  check_geometry(x, y, geometry);
  if (onednn_conv2d_forward(x, weight, bias, geometry, y)) return;
  if (y.dtype() == kF64) {
    forward_typed<double>(x, weight, bias, geometry, y);
  } else {
    forward_typed<float>(x, weight, bias, geometry, y);
  }
}

void conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const ConvShape& geometry,
                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  check_geometry(x, dy, geometry);
  // The gradients have the convolution's compute dtype (dy might have been handed over in another).
  const Tensor& any_grad = dx.defined() ? dx : dweight.defined() ? dweight : dbias;
  if (!any_grad.defined()) return;
  if (any_grad.dtype() == kF64) {
    backward_typed<double>(dy, x, weight, geometry, dx, dweight, dbias);
  } else {
    backward_typed<float>(dy, x, weight, geometry, dx, dweight, dbias);
  }
}

}  // namespace mt::kernels::cpu
