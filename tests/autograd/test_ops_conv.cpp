// Convolution, pooling and batch norm: conv2d, max_pool2d, avg_pool2d,
// adaptive_avg_pool2d and batch_norm against naive f64 loops, gradcheck for
// every input, f16/bf16 against f32, autocast dtypes and error messages.
#include <cmath>

#include "test_util.h"

using namespace mt;
using namespace mt::test;
using Catch::Contains;

namespace {

struct ConvCase {
  const char* name;
  Shape x, w;
  Size2 stride, padding, dilation;
  int64_t groups;
};

// Direct convolution: y[n,o,oy,ox] = b[o] + sum_{c,ki,kj} x[n, g*Cg + c, iy,
// ix] * w[o, c, ki, kj].
std::vector<double> ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 s, Size2 p, Size2 d,
                               int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3), Og = O / groups;
  const int64_t OH = (H + 2 * p.h - d.h * (KH - 1) - 1) / s.h + 1;
  const int64_t OW = (W + 2 * p.w - d.w * (KW - 1) - 1) / s.w + 1;
  const std::vector<double> vx = x.to_vector(), vw = w.to_vector();
  const std::vector<double> vb = b.defined() ? b.to_vector() : std::vector<double>(static_cast<size_t>(O), 0.0);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      const int64_t g = o / Og;
      for (int64_t oy = 0; oy < OH; ++oy) {
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = vb[static_cast<size_t>(o)];
          for (int64_t c = 0; c < Cg; ++c) {
            for (int64_t ki = 0; ki < KH; ++ki) {
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t iy = oy * s.h - p.h + ki * d.h, ix = ox * s.w - p.w + kj * d.w;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += vx[static_cast<size_t>(((n * C + g * Cg + c) * H + iy) * W + ix)] *
                       vw[static_cast<size_t>(((o * Cg + c) * KH + ki) * KW + kj)];
              }
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"stride 2, padding 1, dilation 2, groups 1", {2, 3, 5, 5}, {4, 3, 3, 3}, 2, 1, 2, 1},
      {"stride 2, padding 1, dilation 2, groups 3", {2, 3, 5, 5}, {6, 1, 3, 3}, 2, 1, 2, 3},
      {"3x3 same padding", {2, 3, 5, 5}, {4, 3, 3, 3}, 1, 1, 1, 1},
      {"1x1 pointwise, groups 3", {2, 3, 5, 5}, {3, 1, 1, 1}, 1, 0, 1, 3},
      {"non-square kernel, stride and padding", {2, 2, 6, 5}, {3, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 1},
  };
  return cases;
}

// Pooling windows by hand over [P, H, W] planes of x.
std::vector<double> ref_pool(const Tensor& x, Size2 k, Size2 s, Size2 p, bool is_max, bool count_include_pad) {
  const int64_t H = x.size(-2), W = x.size(-1), P = x.numel() / (H * W);
  const int64_t OH = (H + 2 * p.h - k.h) / s.h + 1, OW = (W + 2 * p.w - k.w) / s.w + 1;
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (int64_t pl = 0; pl < P; ++pl) {
    for (int64_t oy = 0; oy < OH; ++oy) {
      for (int64_t ox = 0; ox < OW; ++ox) {
        double best = -INFINITY, sum = 0;
        int64_t count = 0, padded = 0;
        for (int64_t i = 0; i < k.h; ++i) {
          for (int64_t j = 0; j < k.w; ++j) {
            const int64_t iy = oy * s.h - p.h + i, ix = ox * s.w - p.w + j;
            if (iy < H + p.h && ix < W + p.w) ++padded;  // windows never extend past the far padding
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const double val = v[static_cast<size_t>((pl * H + iy) * W + ix)];
            best = std::max(best, val);
            sum += val;
            ++count;
          }
        }
        out.push_back(is_max ? best : sum / static_cast<double>(count_include_pad ? padded : count));
      }
    }
  }
  return out;
}

std::vector<double> ref_adaptive_avg(const Tensor& x, int64_t OH, int64_t OW) {
  const int64_t H = x.size(-2), W = x.size(-1), P = x.numel() / (H * W);
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (int64_t pl = 0; pl < P; ++pl) {
    for (int64_t i = 0; i < OH; ++i) {
      const auto h0 = static_cast<int64_t>(std::floor(static_cast<double>(i * H) / static_cast<double>(OH)));
      const auto h1 = static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * H) / static_cast<double>(OH)));
      for (int64_t j = 0; j < OW; ++j) {
        const auto w0 = static_cast<int64_t>(std::floor(static_cast<double>(j * W) / static_cast<double>(OW)));
        const auto w1 = static_cast<int64_t>(std::ceil(static_cast<double>((j + 1) * W) / static_cast<double>(OW)));
        double sum = 0;
        for (int64_t a = h0; a < h1; ++a) {
          for (int64_t b = w0; b < w1; ++b) sum += v[static_cast<size_t>((pl * H + a) * W + b)];
        }
        out.push_back(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
    }
  }
  return out;
}

// Per-channel mean and (biased) variance of x [N, C, ...].
void ref_channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const std::vector<double> v = x.to_vector();
  mean.assign(static_cast<size_t>(C), 0.0);
  var.assign(static_cast<size_t>(C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) mean[c] += v[static_cast<size_t>((n * C + c) * S + s)];
    }
    mean[c] /= static_cast<double>(N * S);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) {
        const double dv = v[static_cast<size_t>((n * C + c) * S + s)] - mean[c];
        var[c] += dv * dv;
      }
    }
    var[c] /= static_cast<double>(N * S);
  }
}

std::vector<double> ref_batch_norm(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                                   const Tensor& w, const Tensor& b, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const std::vector<double> v = x.to_vector(), vw = w.to_vector(), vb = b.to_vector();
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t s = 0; s < S; ++s) {
        const double xv = v[static_cast<size_t>((n * C + c) * S + s)];
        out.push_back((xv - mean[c]) / std::sqrt(var[c] + eps) * vw[c] + vb[c]);
      }
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- conv2d

TEST_CASE("conv2d forward matches a direct convolution", "[ops][conv]") {
  for (const ConvCase& c : conv_cases()) {
    const Tensor x = randn64(c.x, 1), w = randn64(c.w, 2), b = randn64({c.w[0]}, 3);
    check_close(conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups),
                ref_conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), kF64Tol, c.name);
    check_close(conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups),
                ref_conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups), kF64Tol,
                std::string(c.name) + " (no bias)");
    // f32 through the borrowed-buffer path, against the f64 reference.
    check_close(conv2d(x.to(kF32), w.to(kF32), b.to(kF32), c.stride, c.padding, c.dilation, c.groups),
                ref_conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), kF32Tol, std::string(c.name) + " f32");
  }
}

TEST_CASE("conv2d output shape follows PyTorch's formula", "[ops][conv]") {
  const Tensor x = zeros({2, 3, 5, 5}, kF64);
  CHECK(conv2d(x, zeros({4, 3, 3, 3}, kF64), Tensor(), 2, 1, 2).sizes() == Shape{2, 4, 2, 2});
  CHECK(conv2d(x, zeros({4, 3, 3, 3}, kF64), Tensor(), 1, 1).sizes() == Shape{2, 4, 5, 5});
  CHECK(conv2d(x, zeros({4, 3, 5, 5}, kF64)).sizes() == Shape{2, 4, 1, 1});
  // A non-contiguous input (a transposed view) gives the same result as its
  // contiguous copy.
  const Tensor xt = randn64({2, 3, 5, 5}, 9).transpose(2, 3), w = randn64({4, 3, 3, 3}, 10);
  check_close(conv2d(xt, w, Tensor(), 1, 1), conv2d(xt.contiguous(), w, Tensor(), 1, 1), kF64Tol);
}

TEST_CASE("conv2d gradients match finite differences", "[ops][conv][gradcheck]") {
  for (const ConvCase& c : conv_cases()) {
    const Tensor x = randn64(c.x, 4), w = randn64(c.w, 5), b = randn64({c.w[0]}, 6);
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups);
        },
        {x, w, b}, c.name);
  }
  // Only some inputs requiring grad: the others get no gradient.
  const Tensor x = randn64({2, 3, 5, 5}, 7).requires_grad_();
  const Tensor w = randn64({4, 3, 3, 3}, 8);
  sum(conv2d(x, w, Tensor(), 2, 1)).backward();
  CHECK(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("conv2d in f16 and bf16 stays close to f32", "[ops][conv][low_precision]") {
  for (const ConvCase& c : conv_cases()) {
    check_low_precision(
        [&](const std::vector<Tensor>& in) {
          return conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups);
        },
        {uniform64(c.x, -1, 1, 11), uniform64(c.w, -0.5, 0.5, 12), uniform64({c.w[0]}, -1, 1, 13)}, c.name);
  }
}

TEST_CASE("conv2d runs in lower precision under autocast", "[ops][conv][autocast]") {
  const Tensor x = randn64({2, 3, 5, 5}, 14).to(kF32).requires_grad_();
  const Tensor w = randn64({4, 3, 3, 3}, 15).to(kF32).requires_grad_();
  const Tensor b = randn64({4}, 16).to(kF32).requires_grad_();
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kBF16);
    y = conv2d(x, w, b, 1, 1);
  }
  CHECK(y.dtype() == kBF16);
  check_close(y, conv2d(x.detach(), w.detach(), b.detach(), 1, 1).to_vector(), kBF16Tol, "bf16 autocast vs f32");
  sum(y).backward();
  CHECK(x.grad().dtype() == kF32);
  CHECK(w.grad().dtype() == kF32);
  CHECK(b.grad().dtype() == kF32);
}

TEST_CASE("conv2d rejects bad shapes with clear messages", "[ops][conv][errors]") {
  const Tensor x = zeros({2, 3, 5, 5});
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 2, 3, 3})), Contains("conv2d") && Contains("[2, 3, 5, 5]") &&
                                                          Contains("[4, 2, 3, 3]") && Contains("channels"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 7, 7})),
                      Contains("conv2d") && Contains("larger than the padded input") && Contains("[4, 3, 7, 7]"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), 1, 0, 3),
                      Contains("larger than the padded input"));  // dilation 3 spans 7
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 1, 3, 3}), Tensor(), 1, 0, 1, 2),
                      Contains("conv2d") && Contains("groups = 2 must divide") && Contains("in_channels = 3"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 1, 3, 3}), Tensor(), 1, 0, 1, 3),
                      Contains("groups = 3 must divide") && Contains("out_channels = 4"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 3, 3}), zeros({3})), Contains("bias [3] must be [4]"));
  REQUIRE_THROWS_WITH(conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3})), Contains("expected input [N, C, H, W]"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), 0), Contains("stride (0, 0)"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 3, 3}, kF64)), Contains("same dtype"));
}

// ---------------------------------------------------------------- pooling

TEST_CASE("max_pool2d and avg_pool2d forward match naive windows", "[ops][pool]") {
  const Tensor x = randn64({2, 3, 7, 6}, 20);
  struct Window {
    Size2 k, s, p;
  };
  for (const Window& win : {Window{2, 2, 0}, Window{3, 2, 1}, Window{{3, 2}, {1, 2}, {1, 0}}, Window{3, 3, 0}}) {
    const std::string what = fmt::format("kernel ({}, {}) stride ({}, {}) padding ({}, {})", win.k.h, win.k.w, win.s.h,
                                         win.s.w, win.p.h, win.p.w);
    check_close(max_pool2d(x, win.k, win.s, win.p), ref_pool(x, win.k, win.s, win.p, true, true), kF64Tol,
                "max " + what);
    check_close(avg_pool2d(x, win.k, win.s, win.p), ref_pool(x, win.k, win.s, win.p, false, true), kF64Tol,
                "avg " + what);
    check_close(avg_pool2d(x, win.k, win.s, win.p, false), ref_pool(x, win.k, win.s, win.p, false, false), kF64Tol,
                "avg (count_include_pad = false) " + what);
  }
  // [C, H, W] inputs pool too.
  check_close(max_pool2d(x.select(0, 1), 2, 2), ref_pool(x.select(0, 1), 2, 2, 0, true, true), kF64Tol, "3-D input");
}

TEST_CASE("max_pool2d routes the gradient to the first maximum", "[ops][pool]") {
  // Every window of 2x2 stride 2 has a tie; the gradient goes to the first
  // element (row-major).
  const Tensor x = f64({1, 1, 0, 2,  //
                        1, 0, 2, 2},
                       {1, 1, 2, 4})
                       .requires_grad_();
  const Tensor y = max_pool2d(x, 2, 2);
  check_equal(y, {1, 2});
  sum(mul(y, f64({10, 20}, {1, 1, 1, 2}))).backward();
  check_equal(x.grad(), {10, 0, 0, 20, 0, 0, 0, 0});
  // Overlapping windows accumulate into the shared maximum.
  const Tensor z = f64({0, 5, 0, 0, 1, 0, 0, 0, 0}, {1, 3, 3}).requires_grad_();
  sum(max_pool2d(z, 2, 1)).backward();
  check_equal(z.grad(), {0, 2, 0, 0, 2, 0, 0, 0, 0});
}

// The CPU kernel selects instead of branching; a select that let a later NaN
// replace an earlier one (or a finite maximum replace a NaN) would move the
// gradient. The sim and CUDA kernels keep the first NaN too (kernels/pool/cuda.cu).
TEST_CASE("max_pool2d routes the gradient to a window's first NaN, in f64 and f32", "[ops][pool]") {
  for (const DType dtype : {kF64, kF32}) {
    const Tensor x = f64({1, NAN, 0, 9,  //
                          NAN, 7, 2, 2},
                         {1, 1, 2, 4})
                         .to(dtype)
                         .requires_grad_();
    const Tensor y = max_pool2d(x, 2, 2);
    const std::vector<double> values = y.to_vector();
    CHECK(std::isnan(values[0]));
    CHECK(values[1] == 9);
    sum(mul(y, f64({10, 20}, {1, 1, 1, 2}).to(dtype))).backward();
    check_equal(x.grad(), {0, 10, 0, 20, 0, 0, 0, 0});
  }
}

// Windows that tile the plane (kernel == stride) take a faster path: a
// horizontal pass over the whole plane (eight lanes at a time for 2 x 2 on
// f32) and a vertical one. Planes wide and long enough for its vector loops
// and masked row ends, with values drawn from {0, 1, 2} and some NaNs, so
// nearly every window has ties: the gradient must still land on the first
// maximum (or first NaN) in raster order, as a naive scan finds it. Catches
// a pass that prefers the later of equal values, a lane shuffle that mixes
// up columns, and a masked tail that reads past a row.
TEST_CASE("max_pool2d over tiling windows picks the raster-order first maximum", "[ops][pool]") {
  struct Case {
    std::vector<int64_t> shape;
    Size2 window;
  };
  for (const Case& c :
       {Case{{2, 3, 12, 20}, 2}, Case{{1, 2, 14, 14}, 2}, Case{{1, 2, 9, 18}, 3}, Case{{1, 1, 7, 34}, 2}}) {
    const int64_t H = c.shape[2], W = c.shape[3], P = c.shape[0] * c.shape[1];
    const int64_t OH = H / c.window.h, OW = W / c.window.w;
    std::vector<double> values(static_cast<size_t>(P * H * W));
    for (size_t i = 0; i < values.size(); ++i) values[i] = (i * 7919 % 31 == 0) ? NAN : double(i * 2654435761u % 3);
    std::vector<int64_t> winner;  // per output, in order: the input element its gradient goes to
    for (int64_t pl = 0; pl < P; ++pl) {
      for (int64_t oy = 0; oy < OH; ++oy) {
        for (int64_t ox = 0; ox < OW; ++ox) {
          int64_t best = -1;
          for (int64_t i = 0; i < c.window.h; ++i) {
            for (int64_t j = 0; j < c.window.w; ++j) {
              const int64_t at = (pl * H + oy * c.window.h + i) * W + ox * c.window.w + j;
              const double v = values[static_cast<size_t>(at)], b = best < 0 ? -INFINITY : values[size_t(best)];
              if (best < 0 || v > b || (std::isnan(v) && !std::isnan(b))) best = at;
            }
          }
          winner.push_back(best);
        }
      }
    }
    std::vector<double> upstream(winner.size());
    for (size_t i = 0; i < upstream.size(); ++i) upstream[i] = double(1 + i);
    // bf16 planes are read and written where they lie (values from {0, 1, 2}
    // and NaN are exact in bf16; the upstream gradient is rounded first).
    for (const DType dtype : {kF64, kF32, kBF16}) {
      const Tensor x = f64(values, c.shape).to(dtype).requires_grad_();
      const Tensor y = max_pool2d(x, c.window, c.window);
      const Tensor up = f64(upstream, {c.shape[0], c.shape[1], OH, OW}).to(dtype);
      const std::vector<double> up_values = up.to_vector();
      std::vector<double> expected_grad(values.size(), 0.0);
      std::vector<double> expected_y(winner.size());
      for (size_t o = 0; o < winner.size(); ++o) {
        expected_grad[static_cast<size_t>(winner[o])] += up_values[o];
        expected_y[o] = values[static_cast<size_t>(winner[o])];
      }
      sum(mul(y, up)).backward();
      INFO(fmt::format("{} {} window {}", dtype, x.shape_string(), c.window.h));
      check_equal(y, expected_y);
      // Without a gradient to route the kernel keeps no indices: the same values.
      check_equal(max_pool2d(x.detach(), c.window, c.window), expected_y);
      check_equal(x.grad(), expected_grad);
    }
  }
}

// u8 planes (an INT8 model's activations between layers) pool to the
// same values as the f32 ones: the 2 x 2 tiling path 32 pairs at a time
// with a tail, rows too short for a vector, and a padded 3 x 3 window.
// Catches the pairs packed out of order (packus interleaves 128-bit
// halves), a tail left unpooled, and a padded window reading outside.
TEST_CASE("max_pool2d and relu take u8 planes as integers", "[ops][pool]") {
  for (const Shape& shape : {Shape{2, 3, 12, 70}, Shape{1, 2, 28, 28}, Shape{1, 1, 4, 6}}) {
    std::vector<double> v(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 2654435761u) % 256);
    const Tensor u8 = from_vector(v, shape, kU8), f32 = from_vector(v, shape, kF32);
    INFO(u8.shape_string());
    CHECK(max_pool2d(u8, 2, 2).dtype() == kU8);
    CHECK(max_pool2d(u8, 2, 2).to_vector() == max_pool2d(f32, 2, 2).to_vector());
    CHECK(max_pool2d(u8, 3, 2, 1).to_vector() == max_pool2d(f32, 3, 2, 1).to_vector());
    const Tensor r = relu(u8);
    CHECK(r.dtype() == kU8);
    CHECK(r.to_vector() == v);
    CHECK(!r.is_same(u8));
  }
}

TEST_CASE("adaptive_avg_pool2d uses PyTorch's window bounds", "[ops][pool]") {
  const Tensor x = randn64({2, 3, 5, 7}, 21);
  for (const auto& [oh, ow] : std::vector<std::pair<int64_t, int64_t>>{{3, 4}, {1, 1}, {5, 7}, {2, 3}, {7, 9}}) {
    check_close(adaptive_avg_pool2d(x, {oh, ow}), ref_adaptive_avg(x, oh, ow), kF64Tol,
                fmt::format("output ({}, {})", oh, ow));
  }
  CHECK(adaptive_avg_pool2d(x, 1).sizes() == Shape{2, 3, 1, 1});
}

TEST_CASE("pooling gradients match finite differences", "[ops][pool][gradcheck]") {
  const Tensor x = randn64({2, 3, 5, 5}, 22);
  require_gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 2, 1); }, {x}, "max_pool2d");
  require_gradcheck([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, 2, 1); }, {x}, "avg_pool2d");
  require_gradcheck([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, 2, 1, false); }, {x},
                    "avg_pool2d, count_include_pad = false");
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return adaptive_avg_pool2d(in[0], {3, 2});
      },
      {x}, "adaptive_avg_pool2d");
}

TEST_CASE("pooling in f16 and bf16 stays close to f32", "[ops][pool][low_precision]") {
  const Tensor x = uniform64({2, 3, 5, 5}, -2, 2, 23);
  check_low_precision([](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 2, 1); }, {x}, "max_pool2d");
  check_low_precision([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, 2, 1); }, {x}, "avg_pool2d");
  check_low_precision(
      [](const std::vector<Tensor>& in) {
        return adaptive_avg_pool2d(in[0], {3, 2});
      },
      {x}, "adaptive_avg_pool2d");
  CHECK(max_pool2d(x.to(kF16), 2, 2).dtype() == kF16);
}

TEST_CASE("pooling rejects bad windows with clear messages", "[ops][pool][errors]") {
  const Tensor x = zeros({2, 3, 5, 5});
  REQUIRE_THROWS_WITH(max_pool2d(x, 7, 1),
                      Contains("max_pool2d") && Contains("larger than the padded input") && Contains("[2, 3, 5, 5]"));
  REQUIRE_THROWS_WITH(avg_pool2d(x, 2, 2, 2), Contains("avg_pool2d") && Contains("at most half the kernel"));
  REQUIRE_THROWS_WITH(max_pool2d(x, 2, 0), Contains("must be positive"));
  REQUIRE_THROWS_WITH(max_pool2d(zeros({5, 5}), 2, 2), Contains("expected input [N, C, H, W] or [C, H, W]"));
  REQUIRE_THROWS_WITH(adaptive_avg_pool2d(x, {0, 2}), Contains("adaptive_avg_pool2d") && Contains("(0, 2)"));
  REQUIRE_THROWS_WITH(max_pool2d(zeros({1, 4, 4}, kI64), 2, 2), Contains("floating"));
}

// ---------------------------------------------------------------- batch_norm

TEST_CASE(
    "batch_norm training normalises with batch statistics and updates "
    "running stats",
    "[ops][batch_norm]") {
  const Tensor x = randn64({4, 3, 2, 5}, 30);
  const Tensor w = randn64({3}, 31), b = randn64({3}, 32);
  const Tensor running_mean = from_vector(std::vector<double>{0.5, -1.0, 2.0}, {3}, kF32);
  const Tensor running_var = from_vector(std::vector<double>{1.0, 2.0, 0.5}, {3}, kF32);
  const std::vector<double> old_mean = running_mean.to_vector(), old_var = running_var.to_vector();
  std::vector<double> mean, var;
  ref_channel_stats(x, mean, var);

  const double momentum = 0.3, eps = 1e-3;
  const Tensor y = batch_norm(x, running_mean, running_var, w, b, true, momentum, eps);
  check_close(y, ref_batch_norm(x, mean, var, w, b, eps), kF64Tol, "training output");

  // PyTorch: running = (1 - momentum) * running + momentum * batch stat, with
  // the unbiased variance.
  const double count = 4 * 2 * 5;
  std::vector<double> want_mean, want_var;
  for (size_t c = 0; c < 3; ++c) {
    want_mean.push_back((1 - momentum) * old_mean[c] + momentum * mean[c]);
    want_var.push_back((1 - momentum) * old_var[c] + momentum * var[c] * count / (count - 1));
  }
  CHECK(running_mean.dtype() == kF32);
  check_close(running_mean, want_mean, kF32Tol, "running_mean");
  check_close(running_var, want_var, kF32Tol, "running_var");

  // Without running buffers, training still works and nothing else changes.
  check_close(batch_norm(x, Tensor(), Tensor(), w, b, true), ref_batch_norm(x, mean, var, w, b, 1e-5), kF64Tol,
              "training without running stats");
  // [N, C] inputs (BatchNorm1d shape) have one value per sample.
  const Tensor x2 = randn64({6, 3}, 33);
  ref_channel_stats(x2, mean, var);
  check_close(batch_norm(x2, Tensor(), Tensor(), w, b), ref_batch_norm(x2, mean, var, w, b, 1e-5), kF64Tol, "[N, C]");
}

TEST_CASE("batch_norm eval mode uses the running statistics", "[ops][batch_norm]") {
  const Tensor x = randn64({2, 3, 4, 4}, 34);
  const Tensor w = randn64({3}, 35), b = randn64({3}, 36);
  const std::vector<double> rm{0.5, -1.0, 2.0}, rv{1.0, 2.0, 0.5};
  const Tensor running_mean = from_vector(rm, {3}, kF32), running_var = from_vector(rv, {3}, kF32);
  const Tensor y = batch_norm(x, running_mean, running_var, w, b, false);
  check_close(y, ref_batch_norm(x, rm, rv, w, b, 1e-5), 1e-6, "eval output");
  check_equal(running_mean, rm, "eval leaves running_mean alone");
  check_equal(running_var, rv, "eval leaves running_var alone");
  // weight and bias are optional.
  check_close(batch_norm(x, running_mean, running_var, Tensor(), Tensor(), false),
              ref_batch_norm(x, rm, rv, ones({3}, kF64), zeros({3}, kF64), 1e-5), 1e-6, "eval without affine");
}

TEST_CASE("batch_norm gradients match finite differences", "[ops][batch_norm][gradcheck]") {
  const Tensor x = randn64({2, 3, 5, 5}, 37), w = randn64({3}, 38), b = randn64({3}, 39);
  const Tensor rm = from_vector(std::vector<double>{0.1, -0.2, 0.3}, {3}, kF64);
  const Tensor rv = from_vector(std::vector<double>{0.8, 1.5, 0.6}, {3}, kF64);
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
      {x, w, b}, "training");
  require_gradcheck([&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2], false); },
                    {x, w, b}, "eval");
  require_gradcheck([](const std::vector<Tensor>& in) { return batch_norm(in[0], Tensor(), Tensor()); }, {x},
                    "training without affine");
}

TEST_CASE("batch_norm in f16 and bf16 stays close to f32, keeps the input dtype under autocast",
          "[ops][batch_norm][low_precision]") {
  check_low_precision(
      [](const std::vector<Tensor>& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
      {uniform64({4, 3, 3, 3}, -2, 2, 40), uniform64({3}, 0.5, 1.5, 41), uniform64({3}, -1, 1, 42)}, "batch_norm");

  const Tensor x = randn64({4, 3, 3, 3}, 43).to(kF16).requires_grad_();
  const Tensor w = ones({3}).requires_grad_(), b = zeros({3}).requires_grad_();
  const Tensor running_mean = zeros({3}), running_var = ones({3});
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kF16);
    y = batch_norm(x, running_mean, running_var, w, b, true);
  }
  // As in PyTorch: f16 in, f16 out; the parameters, statistics and gradients
  // of the parameters stay f32, and the result matches the f32 computation
  // rounded once.
  CHECK(y.dtype() == kF16);
  const Tensor y32 = batch_norm(x.detach().to(kF32), zeros({3}), ones({3}), w.detach(), b.detach(), true);
  const std::vector<double> got = y.to_vector(), want = y32.to_vector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-3 * (1 + std::fabs(want[i])));
  sum(mul(y, y)).backward();
  CHECK(x.grad().dtype() == kF16);
  CHECK(w.grad().dtype() == kF32);
  CHECK(running_mean.dtype() == kF32);
  CHECK(std::fabs(running_mean.to_vector()[0]) > 0);  // moved toward the batch mean
}

TEST_CASE("batch_norm rejects bad inputs with clear messages", "[ops][batch_norm][errors]") {
  const Tensor x = zeros({2, 3, 4, 4});
  REQUIRE_THROWS_WITH(batch_norm(x, zeros({4}), ones({4})),
                      Contains("batch_norm") && Contains("running_mean [4] must be [3]") && Contains("[2, 3, 4, 4]"));
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), ones({2})), Contains("weight [2] must be [3]"));
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                      Contains("eval mode") && Contains("running_mean"));
  REQUIRE_THROWS_WITH(batch_norm(zeros({1, 3}), Tensor(), Tensor()),
                      Contains("more than 1 value per channel") && Contains("[1, 3]"));
  REQUIRE_THROWS_WITH(batch_norm(zeros({3}), Tensor(), Tensor()), Contains("expected input [N, C, ...]"));
}
