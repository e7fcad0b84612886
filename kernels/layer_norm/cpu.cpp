#include "kernels/layer_norm/cpu.h"

#include <optional>

#include "kernels/common/strided.h"
#include "kernels/layer_norm/math.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
const T* optional_data(const std::optional<Loaded<T>>& v) {
  return v ? v->data() : nullptr;
}

// An undefined `mean` means RMSNorm: not centered (math.h).
template <typename T>
void forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = rstd.numel();
  const int64_t n = rows == 0 ? 0 : x.numel() / rows;
  const bool centered = mean.defined();
  Loaded<T> vx(x);
  std::optional<Loaded<T>> vw, vb;
  if (weight.defined()) vw.emplace(weight);
  if (bias.defined()) vb.emplace(bias);
  OutputBuffer<T> vy(y), vrstd(rstd);  // the outputs themselves when contiguous T
  std::optional<OutputBuffer<T>> vmean;
  if (centered) vmean.emplace(mean);
  std::vector<T> unused_means(centered ? 0 : static_cast<size_t>(rows));
  T* means = centered ? vmean->data() : unused_means.data();
  parallel_for(rows, 4 * n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      layer_norm_row(vx.data() + r * n, optional_data(vw), optional_data(vb), vy.data() + r * n, n, static_cast<T>(eps),
                     means + r, vrstd.data() + r, centered);
    }
  });
  vy.commit();
  if (vmean) vmean->commit();
  vrstd.commit();
}

template <typename T>
void backward_typed(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                    const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const int64_t rows = rstd.numel();
  const int64_t n = rows == 0 ? 0 : x.numel() / rows;
  const bool centered = mean.defined();
  Loaded<T> vdy(dy), vx(x), vrstd(rstd);
  std::optional<Loaded<T>> vw, vmean;
  if (weight.defined()) vw.emplace(weight);
  if (centered) vmean.emplace(mean);
  auto mean_of = [&](int64_t r) { return centered ? (*vmean)[r] : T(0); };
  if (dx.defined()) {
    OutputBuffer<T> vdx(dx);
    parallel_for(rows, 4 * n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        layer_norm_backward_row(vdy.data() + r * n, vx.data() + r * n, optional_data(vw), mean_of(r), vrstd[r],
                                vdx.data() + r * n, n, centered);
      }
    });
    vdx.commit();
  }
  // Parameter gradients reduce over rows, accumulated in double; each
  // column adds its rows in order, so threads split the columns.
  if (dweight.defined() || dbias.defined()) {
    std::vector<double> gw(static_cast<size_t>(n), 0.0), gb(static_cast<size_t>(n), 0.0);
    parallel_for(n, 4 * rows, [&](int64_t begin, int64_t end) {
      double* __restrict w_sum = gw.data();
      double* __restrict b_sum = gb.data();
      for (int64_t r = 0; r < rows; ++r) {
        const T* __restrict g = vdy.data() + r * n;
        const T* __restrict xr = vx.data() + r * n;
        const double mean_r = mean_of(r), rstd_r = vrstd[r];
        for (int64_t i = begin; i < end; ++i) {
          w_sum[i] += static_cast<double>(g[i]) * (static_cast<double>(xr[i]) - mean_r) * rstd_r;
          b_sum[i] += static_cast<double>(g[i]);
        }
      }
    });
    if (dweight.defined()) store(gw.data(), dweight);
    if (dbias.defined()) store(gb.data(), dbias);
  }
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  if (x.dtype() == kF64) {
    forward_typed<double>(x, weight, bias, eps, y, mean, rstd);
  } else {
    forward_typed<float>(x, weight, bias, eps, y, mean, rstd);
  }
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  if (x.dtype() == kF64) {
    backward_typed<double>(dy, x, weight, mean, rstd, dx, dweight, dbias);
  } else {
    backward_typed<float>(dy, x, weight, mean, rstd, dx, dweight, dbias);
  }
}

}  // namespace mt::kernels::cpu
