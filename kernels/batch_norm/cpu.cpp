// CPU batch norm over x seen as [N, C, S]. Sums are taken per (n, c) row
// (kernels/common/lane_sum.h's row sums: f32 lanes within blocks of 512
// values, the blocks totalled in double; all in double for f64 inputs),
// then per channel over the rows in order in double (a channel can hold
// N*S ~ 1e5 values), so any thread count gives the same bits; everything
// else computes in f32 (f64 for f64 inputs) and is rounded once on store.
// OpenMP runs over the (n, c) rows, in memory order, for every pass.
#include "kernels/batch_norm/cpu.h"

#include <array>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/common/half_runs.h"
#include "kernels/common/lane_sum.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

struct Layout {
  int64_t n, c, s;
  int64_t count() const { return n * s; }  // values per channel
};

Layout layout_of(const Tensor& x) {
  MT_CHECK(x.dim() >= 2, "batch_norm kernel: expected [N, C, ...], got {}", x.shape_string());
  const int64_t n = x.size(0), c = x.size(1);
  return {n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}

template <typename T>
T value_or(const std::optional<Loaded<T>>& v, int64_t i, T fallback) {
  return v ? (*v)[i] : fallback;
}

// One row's mean and sum of squared deviations from that mean.
struct RowMoments {
  double mean = 0, m2 = 0;
};

// A channel's mean and sum of squared deviations from its N rows of S
// values each: the mean of the row means, and the rows' m2 plus S times each
// row mean's squared deviation from it (the merge of equal-sized groups:
// exact in the same sense as two passes over the channel, nothing large
// subtracted from anything large). One pass over the rows in order, no
// division per row, channels in parallel where there is work enough (Chan's
// merge, two divisions per row in one serial loop: a single-threaded bf16
// forward of [128, 128, 7, 7], 16384 rows of 49, took 0.79 ms against 0.74).
RowMoments channel_moments(const std::vector<RowMoments>& rows, int64_t c, const Layout& L) {
  double sum = 0;
  for (int64_t n = 0; n < L.n; ++n) sum += rows[static_cast<size_t>(n * L.c + c)].mean;
  const double mean = L.n > 0 ? sum / static_cast<double>(L.n) : 0.0;
  double m2 = 0, spread = 0;
  for (int64_t n = 0; n < L.n; ++n) {
    const RowMoments& row = rows[static_cast<size_t>(n * L.c + c)];
    m2 += row.m2;
    spread += (row.mean - mean) * (row.mean - mean);
  }
  return {mean, m2 + static_cast<double>(L.s) * spread};
}

// The statistics read x in memory order, row by row (one row: one sample's
// channel), each row twice while it is in L1; the channels' totals are then
// combined over the rows in a fixed order, so any thread count gives the
// same bits. Walking channel by channel instead (n rows a channel's stride
// apart) left the prefetcher a short run per row: the statistics and the
// backward's sums were 40% of a cnn step's batch norm time.
template <typename T, typename S>
std::vector<RowMoments> row_moments(const S* x, const Layout& L) {
  std::vector<RowMoments> rows(static_cast<size_t>(L.n * L.c));
  parallel_for(L.n * L.c, 2 * L.s, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const S* p = x + row * L.s;
      const T m = L.s > 0 ? static_cast<T>(sum_of(p, L.s) / static_cast<double>(L.s)) : T(0);
      rows[static_cast<size_t>(row)] = {static_cast<double>(m), sum_of_squared_deviations(p, m, L.s)};
    }
  });
  return rows;
}

// q = p * scale + shift over one row.
template <typename T, typename S>
void normalize_row(const S* p, S* q, int64_t n, T scale, T shift) {
  int64_t s = 0;
#if MT_F32X8_LANES
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vscale = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(shift);
    for (; s + 8 <= n; s += 8) store_f32x8(_mm256_fmadd_ps(load_f32x8(p + s), vscale, vshift), q + s);
  }
#endif
  for (; s < n; ++s) q[s] = static_cast<S>(static_cast<T>(p[s]) * scale + shift);
}

// The input gradient over one row: dx = scale * (dy - mean_dy - (x - m) *
// invstd * mean_dy_xhat) in training, dy * scale with running statistics.
template <typename T>
struct InputGradient {
  T scale, m, invstd, mean_dy, mean_dy_xhat;
  bool training;
};

template <typename T, typename S>
void input_gradient_row(const S* g, const S* p, S* q, int64_t n, const InputGradient<T>& k) {
  int64_t s = 0;
#if MT_F32X8_LANES
  if constexpr (std::is_same_v<T, float>) {
    const __m256 scale = _mm256_set1_ps(k.scale);
    if (!k.training) {
      for (; s + 8 <= n; s += 8) store_f32x8(_mm256_mul_ps(load_f32x8(g + s), scale), q + s);
    } else {
      const __m256 m = _mm256_set1_ps(k.m), invstd = _mm256_set1_ps(k.invstd);
      const __m256 mean_dy = _mm256_set1_ps(k.mean_dy), mean_dy_xhat = _mm256_set1_ps(k.mean_dy_xhat);
      for (; s + 8 <= n; s += 8) {
        const __m256 centred = _mm256_sub_ps(load_f32x8(g + s), mean_dy);
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load_f32x8(p + s), m), invstd);
        store_f32x8(_mm256_mul_ps(scale, _mm256_fnmadd_ps(xhat, mean_dy_xhat, centred)), q + s);
      }
    }
  }
#endif
  for (; s < n; ++s) {
    const T gs = static_cast<T>(g[s]);
    q[s] = static_cast<S>(k.training
                              ? k.scale * (gs - k.mean_dy - (static_cast<T>(p[s]) - k.m) * k.invstd * k.mean_dy_xhat)
                              : gs * k.scale);
  }
}

template <typename T>
void forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                   const Tensor& running_var, const BatchNormArgs& args, const Tensor& y, const Tensor& save_mean,
                   const Tensor& save_invstd) {
  const Layout L = layout_of(x);  // row n * C + c: sample n's channel c
  std::optional<Loaded<T>> vw, vb;
  if (weight.defined()) vw.emplace(weight);
  if (bias.defined()) vb.emplace(bias);
  std::vector<T> mean(static_cast<size_t>(L.c)), invstd(static_cast<size_t>(L.c));
  with_rows<T>(std::array{&x}, y, [&](const auto& in, auto* out) {
    const auto* xs = in[0];
    if (args.training) {
      std::vector<double> var_unbiased(static_cast<size_t>(L.c));
      const std::vector<RowMoments> rows = row_moments<T>(xs, L);
      parallel_for(L.c, 3 * L.n, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          const RowMoments channel = channel_moments(rows, c, L);
          const double var = channel.m2 / static_cast<double>(L.count());
          mean[static_cast<size_t>(c)] = static_cast<T>(channel.mean);
          invstd[static_cast<size_t>(c)] = static_cast<T>(1.0 / std::sqrt(var + args.eps));
          var_unbiased[static_cast<size_t>(c)] = L.count() > 1 ? channel.m2 / static_cast<double>(L.count() - 1) : var;
        }
      });
      // running = (1 - momentum) * running + momentum * batch statistic, as
      // PyTorch.
      auto update = [&](const Tensor& running, auto&& batch_stat) {
        if (!running.defined()) return;
        const Loaded<double> old(running);
        std::vector<double> next(static_cast<size_t>(L.c));
        for (int64_t c = 0; c < L.c; ++c) {
          next[static_cast<size_t>(c)] = (1 - args.momentum) * old[c] + args.momentum * batch_stat(c);
        }
        store(next.data(), running);
      };
      update(running_mean, [&](int64_t c) { return static_cast<double>(mean[static_cast<size_t>(c)]); });
      update(running_var, [&](int64_t c) { return var_unbiased[static_cast<size_t>(c)]; });
    } else {
      const Loaded<double> rm(running_mean), rv(running_var);
      for (int64_t c = 0; c < L.c; ++c) {
        mean[static_cast<size_t>(c)] = static_cast<T>(rm[c]);
        invstd[static_cast<size_t>(c)] = static_cast<T>(1.0 / std::sqrt(rv[c] + args.eps));
      }
    }
    parallel_for(L.n * L.c, L.s, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row % L.c;
        const T scale = invstd[static_cast<size_t>(c)] * value_or(vw, c, T(1));
        const T shift = value_or(vb, c, T(0)) - mean[static_cast<size_t>(c)] * scale;
        normalize_row(xs + row * L.s, out + row * L.s, L.s, scale, shift);
      }
    });
  });
  store(mean.data(), save_mean);
  store(invstd.data(), save_invstd);
}

template <typename T>
void backward_typed(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                    const Tensor& save_invstd, bool training, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias) {
  const Layout L = layout_of(x);
  const Loaded<T> vmean(save_mean), vinvstd(save_invstd);
  std::optional<Loaded<T>> vw;
  if (weight.defined()) vw.emplace(weight);
  with_rows<T>(std::array{&dy, &x}, dx, [&](const auto& in, auto* out) {
    const auto *dys = in[0], *xs = in[1];
    // Per channel: sum(dy) and sum(dy * xhat), the gradients of bias and weight.
    std::vector<T> sum_dy(static_cast<size_t>(L.c)), sum_dy_xhat(static_cast<size_t>(L.c));
    // Row by row in memory order (as row_moments), then over the rows per channel.
    std::vector<double> row_dy(static_cast<size_t>(L.n * L.c)), row_dy_xc(static_cast<size_t>(L.n * L.c));
    parallel_for(L.n * L.c, 2 * L.s, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T m = vmean[row % L.c];
        row_dy[static_cast<size_t>(row)] = sum_of(dys + row * L.s, L.s);
        row_dy_xc[static_cast<size_t>(row)] = sum_of_products_with_deviations(dys + row * L.s, xs + row * L.s, m, L.s);
      }
    });
    parallel_for(L.c, 2 * L.n, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double a = 0, b = 0;
        for (int64_t n = 0; n < L.n; ++n) {
          a += row_dy[static_cast<size_t>(n * L.c + c)];
          b += row_dy_xc[static_cast<size_t>(n * L.c + c)];
        }
        sum_dy[static_cast<size_t>(c)] = static_cast<T>(a);
        sum_dy_xhat[static_cast<size_t>(c)] = static_cast<T>(b * vinvstd[c]);
      }
    });
    if (dweight.defined()) store(sum_dy_xhat.data(), dweight);
    if (dbias.defined()) store(sum_dy.data(), dbias);
    if (out == nullptr) return;
    const T inv_count = L.count() > 0 ? T(1) / static_cast<T>(L.count()) : T(0);
    parallel_for(L.n * L.c, L.s, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t c = row % L.c;
        const InputGradient<T> k{vinvstd[c] * value_or(vw, c, T(1)),
                                 vmean[c],
                                 vinvstd[c],
                                 sum_dy[static_cast<size_t>(c)] * inv_count,
                                 sum_dy_xhat[static_cast<size_t>(c)] * inv_count,
                                 training};
        input_gradient_row(dys + row * L.s, xs + row * L.s, out + row * L.s, L.s, k);
      }
    });
  });
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                        const Tensor& running_var, const BatchNormArgs& args, const Tensor& y, const Tensor& save_mean,
                        const Tensor& save_invstd) {
  if (x.dtype() == kF64) {
    forward_typed<double>(x, weight, bias, running_mean, running_var, args, y, save_mean, save_invstd);
  } else {
    forward_typed<float>(x, weight, bias, running_mean, running_var, args, y, save_mean, save_invstd);
  }
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, bool training, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) {
  if (x.dtype() == kF64) {
    backward_typed<double>(dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
  } else {
    backward_typed<float>(dy, x, weight, save_mean, save_invstd, training, dx, dweight, dbias);
  }
}

void batch_norm_commit_unless(const Tensor& found_inf, const Tensor& staged_mean, const Tensor& staged_var,
                              const Tensor& running_mean, const Tensor& running_var, const Tensor& num_batches_tracked,
                              int64_t batches) {
  if (found_inf.defined() && Loaded<float>(found_inf)[0] != 0.0f) return;  // skipped (NaN too): nothing moves
  auto commit = [](const Tensor& staged, const Tensor& running) {
    if (running.defined()) store(Loaded<double>(staged).data(), running);  // f64 holds every acc value exactly
  };
  commit(staged_mean, running_mean);
  commit(staged_var, running_var);
  if (num_batches_tracked.defined()) {
    *num_batches_tracked.data<int64_t>() += batches;
    num_batches_tracked.storage()->bump_version();
  }
}

}  // namespace mt::kernels::cpu
