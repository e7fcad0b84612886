// softmax / log_softmax, layer_norm and cross_entropy CUDA kernels
// (kernels/{softmax,layer_norm,cross_entropy}/cuda.cu) run on the SIMT
// simulator and compared with a double reference built on the same per-row
// math the CPU backend uses (kernels/common).
#include <catch2/catch.hpp>
#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/layer_norm/math.h"
#include "kernels/softmax/math.h"
#include "kernels/cross_entropy/api.h"
#include "kernels/layer_norm/api.h"
#include "kernels/softmax/api.h"
#include "tests/kernels/gemm_test_util.h"

namespace {

using mt::kernels::KernelDType;
using mt::test::DeviceLikeBuffer;

const KernelDType kAllDTypes[] = {KernelDType::F32, KernelDType::F16, KernelDType::BF16, KernelDType::F64};

KernelDType acc_dtype(KernelDType t) { return t == KernelDType::F64 ? KernelDType::F64 : KernelDType::F32; }
double out_eps(KernelDType t) {
  switch (t) {
    case KernelDType::F16: return 1.0 / 1024;
    case KernelDType::BF16: return 1.0 / 128;
    case KernelDType::F32: return 1e-6;
    case KernelDType::F64: return 1e-14;
  }
  return 0;
}
double acc_eps(KernelDType t) { return t == KernelDType::F64 ? 1e-12 : 2e-5; }

std::vector<double> values(const DeviceLikeBuffer& b) {
  std::vector<double> v(b.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = b.get(i);
  return v;
}

// Counts mismatches, reporting the first few.
struct Checker {
  int bad = 0;
  void operator()(const char* what, size_t i, double got, double ref, double tol) {
    if (!(std::abs(got - ref) <= tol) && ++bad <= 5) {
      UNSCOPED_INFO(what << "[" << i << "] = " << got << ", expected " << ref << " (tol " << tol << ")");
    }
  }
};

}  // namespace

TEST_CASE("sim softmax and log_softmax forward/backward match the reference", "[sim][softmax]") {
  for (KernelDType dtype : kAllDTypes) {
    // 13000 f32/f64 values exceed the 48 KB row cache: the two-read path.
    for (int64_t cols : {1, 7, 33, 300, 13000}) {
      const int64_t rows = cols > 1000 ? 2 : 5;
      for (bool log : {false, true}) {
        INFO(mt::kernels::kernel_dtype_name(dtype) << " cols=" << cols << " log=" << log);
        std::mt19937 rng(static_cast<unsigned>(cols));
        const size_t n = static_cast<size_t>(rows * cols);
        DeviceLikeBuffer x(dtype, n), y(dtype, n), dy(dtype, n), dx(dtype, n);
        x.fill_random(rng, -6, 6);
        dy.fill_random(rng);
        mt::sim::softmax_forward(dtype, x.data(), y.data(), rows, cols, log, {});
        mt::sim::softmax_backward(dtype, dy.data(), y.data(), dx.data(), rows, cols, log, {});
        const auto vx = values(x), vy = values(y), vdy = values(dy), vdx = values(dx);
        std::vector<double> ref_y(n), ref_dx(n);
        Checker check;
        for (int64_t r = 0; r < rows; ++r) {
          const size_t o = static_cast<size_t>(r * cols);
          mt::kernels::softmax_row(vx.data() + o, ref_y.data() + o, cols, log);
          // Backward from the kernel's own (rounded) y, as autograd would run it.
          mt::kernels::softmax_backward_row(vdy.data() + o, vy.data() + o, ref_dx.data() + o, cols, log);
        }
        for (size_t i = 0; i < n; ++i) {
          check("y", i, vy[i], ref_y[i], out_eps(dtype) * std::abs(ref_y[i]) + acc_eps(dtype) * (log ? 10 : 1));
          check("dx", i, vdx[i], ref_dx[i], out_eps(dtype) * std::abs(ref_dx[i]) + acc_eps(dtype) * 10);
        }
        CHECK(check.bad == 0);
      }
    }
  }
}

// Catches, per rung of the softmax ladder: v1's three passes reading another
// row, v2's lanes merging (max, sum) pairs without rescaling, v3's vectors
// misplaced or its register-held row reused past kMaxVectorsPerLane vectors
// (2048 f16 values fit, 4096 are read twice), v3 taking rows it cannot
// vectorize (an odd width, a buffer off 16-byte alignment), rows past the
// first block (130 rows); and a NaN or all -inf row not NaN.
TEST_CASE("sim softmax ladder: every rung matches the reference", "[sim][softmax][ladder]") {
  using mt::kernels::SoftmaxRung;
  for (const SoftmaxRung rung : {SoftmaxRung::V1ThreadPerRow, SoftmaxRung::V2WarpPerRow, SoftmaxRung::V3VectorLoads,
                                 SoftmaxRung::V4BlockPerRow}) {
    for (KernelDType dtype : {KernelDType::F32, KernelDType::F16, KernelDType::BF16}) {
      for (const auto& [rows, cols, offset] : std::vector<std::tuple<int64_t, int64_t, int>>{
               {5, 1, 0}, {5, 7, 0}, {130, 32, 0}, {3, 264, 0}, {3, 2048, 0}, {3, 4096, 0}, {3, 64, 1}}) {
        INFO(mt::kernels::softmax_rung_name(rung) << " " << mt::kernels::kernel_dtype_name(dtype) << " " << rows
                                                  << " x " << cols << (offset ? " (unaligned)" : ""));
        std::mt19937 rng(static_cast<unsigned>(cols + rows));
        const size_t n = static_cast<size_t>(rows * cols);
        DeviceLikeBuffer x(dtype, n + 8), y(dtype, n + 8);
        x.fill_random(rng, -6, 6);
        if (rows >= 3) {
          x.set(static_cast<size_t>(offset + cols), NAN);  // row 1 holds a NaN
          for (int64_t c = 0; c < cols; ++c) x.set(static_cast<size_t>(offset + 2 * cols + c), -INFINITY);  // row 2
        }
        const size_t bytes = mt::test::kernel_dtype_size(dtype) * static_cast<size_t>(offset);
        mt::sim::softmax_ladder_forward(rung, dtype, static_cast<const char*>(x.data()) + bytes,
                                        static_cast<char*>(y.data()) + bytes, rows, cols, {});
        const auto vx = values(x), vy = values(y);
        std::vector<double> ref(n);
        for (int64_t r = 0; r < rows; ++r) {
          const size_t o = static_cast<size_t>(r * cols);
          mt::kernels::softmax_row(vx.data() + offset + o, ref.data() + o, cols, false);
        }
        Checker check;
        for (size_t i = 0; i < n; ++i) {
          const double got = vy[i + static_cast<size_t>(offset)];
          if (std::isnan(ref[i])) {
            if (!std::isnan(got) && ++check.bad <= 5) UNSCOPED_INFO("y[" << i << "] = " << got << ", expected NaN");
            continue;
          }
          check("y", i, got, ref[i], out_eps(dtype) * std::abs(ref[i]) + acc_eps(dtype));
        }
        CHECK(check.bad == 0);
      }
    }
  }
}

TEST_CASE("sim softmax keeps -inf entries at zero probability and is exact on large logits", "[sim][softmax]") {
  DeviceLikeBuffer x(KernelDType::F16, 4), y(KernelDType::F16, 4);
  x.set(0, -INFINITY), x.set(1, 60000), x.set(2, 60000), x.set(3, -INFINITY);
  mt::sim::softmax_forward(KernelDType::F16, x.data(), y.data(), 1, 4, false, {});
  CHECK(y.get(0) == 0);
  CHECK(y.get(1) == 0.5);
  CHECK(y.get(2) == 0.5);
  CHECK(y.get(3) == 0);
}

TEST_CASE("sim layer_norm forward/backward match the reference, with and without affine", "[sim][layer_norm]") {
  for (KernelDType dtype : kAllDTypes) {
    for (int64_t cols : {1, 5, 64, 333, 13000}) {
      for (bool affine : {true, false}) {
        const int64_t rows = cols > 1000 ? 3 : 37;
        INFO(mt::kernels::kernel_dtype_name(dtype) << " cols=" << cols << " affine=" << affine);
        std::mt19937 rng(static_cast<unsigned>(cols) + 7);
        const size_t n = static_cast<size_t>(rows * cols);
        const KernelDType stats = acc_dtype(dtype);
        DeviceLikeBuffer x(dtype, n), y(dtype, n), dy(dtype, n), dx(dtype, n);
        DeviceLikeBuffer w(dtype, static_cast<size_t>(cols)), b(dtype, static_cast<size_t>(cols));
        DeviceLikeBuffer dw(dtype, static_cast<size_t>(cols)), db(dtype, static_cast<size_t>(cols));
        DeviceLikeBuffer mean(stats, static_cast<size_t>(rows)), rstd(stats, static_cast<size_t>(rows));
        x.fill_random(rng, -2, 3);
        dy.fill_random(rng);
        w.fill_random(rng, 0.5, 1.5);
        b.fill_random(rng);
        const double eps = 1e-5;
        mt::sim::layer_norm_forward(dtype, x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr, eps,
                                    y.data(), mean.data(), rstd.data(), rows, cols, {});
        mt::sim::layer_norm_backward(dtype, dy.data(), x.data(), affine ? w.data() : nullptr, mean.data(), rstd.data(),
                                     dx.data(), affine ? dw.data() : nullptr, affine ? db.data() : nullptr, rows, cols,
                                     {});
        const auto vx = values(x), vw = values(w), vb = values(b), vdy = values(dy);
        Checker check;
        std::vector<double> ref_y(static_cast<size_t>(cols)), ref_dx(static_cast<size_t>(cols));
        std::vector<double> ref_dw(static_cast<size_t>(cols), 0.0), ref_db(static_cast<size_t>(cols), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const size_t o = static_cast<size_t>(r * cols);
          double m = 0, s = 0;
          mt::kernels::layer_norm_row(vx.data() + o, affine ? vw.data() : nullptr, affine ? vb.data() : nullptr,
                                      ref_y.data(), cols, eps, &m, &s);
          check("mean", static_cast<size_t>(r), mean.get(static_cast<size_t>(r)), m, acc_eps(dtype));
          check("rstd", static_cast<size_t>(r), rstd.get(static_cast<size_t>(r)), s, acc_eps(dtype) * s);
          mt::kernels::layer_norm_backward_row(vdy.data() + o, vx.data() + o, affine ? vw.data() : nullptr, m, s,
                                               ref_dx.data(), cols);
          for (int64_t c = 0; c < cols; ++c) {
            const size_t i = o + static_cast<size_t>(c);
            check("y", i, y.get(i), ref_y[static_cast<size_t>(c)],
                  out_eps(dtype) * std::abs(ref_y[static_cast<size_t>(c)]) + acc_eps(dtype) * 10);
            check("dx", i, dx.get(i), ref_dx[static_cast<size_t>(c)],
                  out_eps(dtype) * std::abs(ref_dx[static_cast<size_t>(c)]) + acc_eps(dtype) * 10 * s);
            ref_dw[static_cast<size_t>(c)] += vdy[i] * (vx[i] - m) * s;
            ref_db[static_cast<size_t>(c)] += vdy[i];
          }
        }
        if (affine) {
          for (size_t c = 0; c < static_cast<size_t>(cols); ++c) {
            check("dweight", c, dw.get(c), ref_dw[c], out_eps(dtype) * std::abs(ref_dw[c]) + acc_eps(dtype) * rows * 4);
            check("dbias", c, db.get(c), ref_db[c], out_eps(dtype) * std::abs(ref_db[c]) + acc_eps(dtype) * rows);
          }
        }
        CHECK(check.bad == 0);
      }
    }
  }
}

// Catches, per rung of the layer_norm ladder: v1 reading another row, v2's
// lanes merged without Chan's correction (M2 summed as if every lane had the
// same mean), statistics from E[x^2] - E[x]^2 (row 1 sits at 1000 with a
// spread of 0.01: f32 cancels to garbage there), v3's vectors misplaced, its
// register-held row reused past kMaxVectorsPerLane vectors, or taking rows it
// cannot vectorize; weight and bias applied to the wrong column; rows past
// the first block (130 rows); a constant row (variance 0) not giving bias.
TEST_CASE("sim layer_norm ladder: every rung matches the reference", "[sim][layer_norm][ladder]") {
  using mt::kernels::LayerNormRung;
  for (const LayerNormRung rung : {LayerNormRung::V1ThreadPerRow, LayerNormRung::V2WarpPerRow,
                                   LayerNormRung::V3VectorLoads, LayerNormRung::V4BlockPerRow}) {
    for (KernelDType dtype : {KernelDType::F32, KernelDType::F16, KernelDType::BF16}) {
      for (const auto& [rows, cols, offset] : std::vector<std::tuple<int64_t, int64_t, int>>{
               {5, 1, 0}, {5, 7, 0}, {130, 32, 0}, {3, 264, 0}, {3, 2048, 0}, {3, 4096, 0}, {3, 64, 1}}) {
        INFO(mt::kernels::layer_norm_rung_name(rung) << " " << mt::kernels::kernel_dtype_name(dtype) << " " << rows
                                                     << " x " << cols << (offset ? " (unaligned)" : ""));
        std::mt19937 rng(static_cast<unsigned>(3 * cols + rows));
        const size_t n = static_cast<size_t>(rows * cols);
        DeviceLikeBuffer x(dtype, n + 8), y(dtype, n + 8), w(dtype, static_cast<size_t>(cols)),
            b(dtype, static_cast<size_t>(cols));
        DeviceLikeBuffer mean(KernelDType::F32, static_cast<size_t>(rows)), rstd(KernelDType::F32, static_cast<size_t>(rows));
        x.fill_random(rng, -2, 3);
        w.fill_random(rng, 0.5, 1.5);
        b.fill_random(rng);
        if (rows >= 3 && dtype == KernelDType::F32) {
          std::uniform_real_distribution<double> spread(-0.01, 0.01);
          for (int64_t c = 0; c < cols; ++c) x.set(static_cast<size_t>(offset + cols + c), 1000 + spread(rng));
        }
        if (rows >= 3) {
          for (int64_t c = 0; c < cols; ++c) x.set(static_cast<size_t>(offset + 2 * cols + c), 0.75);  // row 2
        }
        const size_t bytes = mt::test::kernel_dtype_size(dtype) * static_cast<size_t>(offset);
        const double eps = 1e-5;
        mt::sim::layer_norm_ladder_forward(rung, dtype, static_cast<const char*>(x.data()) + bytes, w.data(), b.data(),
                                           eps, static_cast<char*>(y.data()) + bytes, mean.data(), rstd.data(), rows,
                                           cols, {});
        const auto vx = values(x), vw = values(w), vb = values(b);
        std::vector<double> ref(static_cast<size_t>(cols));
        Checker check;
        for (int64_t r = 0; r < rows; ++r) {
          const size_t o = static_cast<size_t>(offset + r * cols);
          double m = 0, s = 0;
          mt::kernels::layer_norm_row(vx.data() + o, vw.data(), vb.data(), ref.data(), cols, eps, &m, &s);
          const auto ri = static_cast<size_t>(r);
          check("mean", ri, mean.get(ri), m, acc_eps(dtype) * (1 + std::abs(m)));
          // Row 1 at 1000: a mean rounded to f32 (off by ~4e-4 after 264 additions) adds its square to the
          // variance of 3e-5, a few tenths of a percent; E[x^2] - E[x]^2 would be off by orders of magnitude.
          const bool at_1000 = r == 1 && rows >= 3 && dtype == KernelDType::F32;
          check("rstd", ri, rstd.get(ri), s, (at_1000 ? 2e-2 : 1e-3) * s);
          for (int64_t c = 0; c < cols; ++c) {
            const auto ci = static_cast<size_t>(c);
            // A mean rounded to f32 (a few ulps off at 1000) shifts y by that error times rstd * w.
            const double mean_error = 8 * std::abs(m) * 1.2e-7 * s * 1.5;
            check("y", o + ci, y.get(o + ci), ref[ci], out_eps(dtype) * std::abs(ref[ci]) + 1e-3 + mean_error);
          }
        }
        CHECK(check.bad == 0);
      }
    }
  }
}

TEST_CASE("sim layer_norm parameter gradients are deterministic and cover rows == 0", "[sim][layer_norm]") {
  const int64_t rows = 50, cols = 40;
  std::mt19937 rng(3);
  DeviceLikeBuffer x(KernelDType::F32, rows * cols), dy(KernelDType::F32, rows * cols);
  DeviceLikeBuffer mean(KernelDType::F32, rows), rstd(KernelDType::F32, rows), y(KernelDType::F32, rows * cols);
  x.fill_random(rng);
  dy.fill_random(rng);
  mt::sim::layer_norm_forward(KernelDType::F32, x.data(), nullptr, nullptr, 1e-5, y.data(), mean.data(), rstd.data(),
                              rows, cols, {});
  DeviceLikeBuffer dw1(KernelDType::F32, cols), dw2(KernelDType::F32, cols), db(KernelDType::F32, cols);
  mt::sim::layer_norm_backward(KernelDType::F32, dy.data(), x.data(), nullptr, mean.data(), rstd.data(), nullptr,
                               dw1.data(), nullptr, rows, cols, {});
  mt::sim::layer_norm_backward(KernelDType::F32, dy.data(), x.data(), nullptr, mean.data(), rstd.data(), nullptr,
                               dw2.data(), nullptr, rows, cols, {});
  CHECK(values(dw1) == values(dw2));
  db.fill(7);
  mt::sim::layer_norm_backward(KernelDType::F32, dy.data(), x.data(), nullptr, mean.data(), rstd.data(), nullptr,
                               nullptr, db.data(), 0, cols, {});
  CHECK(values(db) == std::vector<double>(cols, 0.0));
}

TEST_CASE("sim cross_entropy forward/backward: ignore_index, label smoothing, broadcast grad", "[sim][cross_entropy]") {
  for (KernelDType dtype : kAllDTypes) {
    for (int64_t classes : {1, 5, 37, 1000}) {
      for (double smoothing : {0.0, 0.1}) {
        for (int64_t grad_stride : {1, 0}) {
          INFO(mt::kernels::kernel_dtype_name(dtype)
               << " C=" << classes << " smoothing=" << smoothing << " grad_stride=" << grad_stride);
          const int64_t rows = 6, ignore = -100;
          std::mt19937 rng(static_cast<unsigned>(classes) * 3);
          const size_t n = static_cast<size_t>(rows * classes);
          const KernelDType acc = acc_dtype(dtype);
          DeviceLikeBuffer logits(dtype, n), grad(dtype, n);
          DeviceLikeBuffer loss(acc, rows), stats(acc, 2 * rows), grad_loss(acc, rows);
          logits.fill_random(rng, -5, 5);
          grad_loss.fill_random(rng, 0.5, 2);
          std::vector<int64_t> target(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) target[static_cast<size_t>(r)] = (r * 7 + 3) % classes;
          target[2] = ignore;
          mt::sim::cross_entropy_forward(dtype, logits.data(), target.data(), loss.data(), stats.data(), rows, classes,
                                         ignore, smoothing, {});
          mt::sim::cross_entropy_backward(dtype, logits.data(), target.data(), stats.data(), grad_loss.data(),
                                          grad_stride, grad.data(), rows, classes, ignore, smoothing, {});
          const auto vx = values(logits);
          Checker check;
          for (int64_t r = 0; r < rows; ++r) {
            const size_t o = static_cast<size_t>(r * classes);
            const auto ref = mt::kernels::row_stats<double>(vx.data() + o, classes);
            const double row_lse = ref.max + std::log(ref.sum);
            const int64_t label = target[static_cast<size_t>(r)];
            const size_t at = static_cast<size_t>(2 * r);
            check("max", static_cast<size_t>(r), stats.get(at), ref.max, 0.0);
            check("log_sum", static_cast<size_t>(r), stats.get(at + 1), std::log(ref.sum), acc_eps(dtype) * 10);
            double ref_loss = 0;
            if (label != ignore) {
              ref_loss = (1 - smoothing) * (row_lse - vx[o + static_cast<size_t>(label)]);
              for (int64_t c = 0; c < classes; ++c) {
                ref_loss += smoothing / static_cast<double>(classes) * (row_lse - vx[o + static_cast<size_t>(c)]);
              }
            }
            check("loss", static_cast<size_t>(r), loss.get(static_cast<size_t>(r)), ref_loss, acc_eps(dtype) * 50);
            const double g = grad_loss.get(static_cast<size_t>(r * grad_stride));
            for (int64_t c = 0; c < classes; ++c) {
              const size_t i = o + static_cast<size_t>(c);
              double ref = 0;
              if (label != ignore) {
                const double q = (c == label ? 1 - smoothing : 0) + smoothing / static_cast<double>(classes);
                ref = g * (std::exp(vx[i] - row_lse) - q);
              }
              check("grad", i, grad.get(i), ref, out_eps(dtype) * std::abs(ref) + acc_eps(dtype) * 10);
            }
          }
          CHECK(check.bad == 0);
        }
      }
    }
  }
}

TEST_CASE("sim cross_entropy marks an out-of-range target with NaN", "[sim][cross_entropy]") {
  DeviceLikeBuffer logits(KernelDType::F32, 6), loss(KernelDType::F32, 2), lse(KernelDType::F32, 2);
  logits.fill(1);
  const int64_t target[2] = {1, 5};
  mt::sim::cross_entropy_forward(KernelDType::F32, logits.data(), target, loss.data(), lse.data(), 2, 3, -100, 0, {});
  CHECK(std::abs(loss.get(0) - std::log(3.0)) < 1e-6);
  CHECK(std::isnan(loss.get(1)));
}

// ---- the Tensor-level dispatchers on the sim device, through autograd ----

#include "tests/kernels/sim_tensor_util.h"

TEST_CASE("softmax, log_softmax and layer_norm on the sim device match the CPU, forward and backward",
          "[sim][softmax][layer_norm]") {
  using namespace mt;
  for (DType dtype : {kF32, kF16, kBF16, kF64}) {
    INFO(dtype_name(dtype));
    const Tensor x_cpu = test::random_tensor({4, 6, 50}, dtype, kCPU, 11, -3, 3);
    const Tensor w_cpu = test::random_tensor({50}, dtype, kCPU, 12, 0.5, 1.5);
    const Tensor b_cpu = test::random_tensor({50}, dtype, kCPU, 13);
    const Tensor go_cpu = test::random_tensor({4, 6, 50}, dtype, kCPU, 14);
    for (int which = 0; which < 4; ++which) {
      INFO("op " << which);
      Tensor x[2], w[2], b[2], y[2];
      for (int d = 0; d < 2; ++d) {
        const Device device = d == 0 ? kCPU : test::kCudaPath;
        x[d] = x_cpu.to(device).detach().requires_grad_();
        w[d] = w_cpu.to(device).detach().requires_grad_();
        b[d] = b_cpu.to(device).detach().requires_grad_();
        switch (which) {
          case 0: y[d] = softmax(x[d], -1); break;
          case 1: y[d] = log_softmax(x[d], 1); break;  // not the last dim: a strided view reaches the kernel
          case 2: y[d] = layer_norm(x[d], {50}, w[d], b[d], 1e-5); break;
          default: y[d] = layer_norm(x[d], {6, 50}, Tensor(), Tensor(), 1e-5); break;
        }
        sum(mul(y[d], go_cpu.to(device))).backward();
      }
      CHECK(y[1].device() == test::kCudaPath);
      const double tol = 4 * test::dtype_tolerance(dtype);
      CHECK(test::relative_difference(y[1], y[0]) <= tol);
      CHECK(test::relative_difference(x[1].grad(), x[0].grad()) <= tol);
      if (which == 2) {
        CHECK(test::relative_difference(w[1].grad(), w[0].grad()) <= 4 * tol);
        CHECK(test::relative_difference(b[1].grad(), b[0].grad()) <= 4 * tol);
      }
    }
  }
}

TEST_CASE("cross_entropy on the sim device matches the CPU, with ignore_index and label smoothing",
          "[sim][cross_entropy]") {
  using namespace mt;
  const Tensor target_cpu = from_vector(std::vector<int64_t>{3, -100, 0, 9, 4, 4, 1}, {7});
  for (DType dtype : {kF32, kF16, kBF16, kF64}) {
    for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      INFO(dtype_name(dtype) << " reduction " << static_cast<int>(reduction));
      const Tensor logits_cpu = test::random_tensor({7, 10}, dtype, kCPU, 21, -4, 4);
      Tensor logits[2], loss[2];
      for (int d = 0; d < 2; ++d) {
        const Device device = d == 0 ? kCPU : test::kCudaPath;
        logits[d] = logits_cpu.to(device).detach().requires_grad_();
        CrossEntropyOptions options;
        options.label_smoothing = 0.1;
        options.reduction = reduction;
        loss[d] = cross_entropy(logits[d], target_cpu.to(device), options);
        sum(loss[d]).backward();
      }
      const double tol = 4 * test::dtype_tolerance(dtype);
      CHECK(test::relative_difference(loss[1], loss[0]) <= tol);
      CHECK(test::relative_difference(logits[1].grad(), logits[0].grad()) <= tol);
    }
  }
  const Tensor bad = from_vector(std::vector<int64_t>{3, 10}, {2}, kI64, kSIM);
  CHECK_THROWS_WITH(cross_entropy(test::random_tensor({2, 10}, kF32, kSIM, 1), bad), Catch::Contains("out of range"));
}

// Catches (PyTorch parity): the block reduction's combine step returning
// {-inf, 0} when both partial maxima were -inf, which dropped a lane whose
// only element was NaN: softmax of [1, NaN, 2] gave [0.269, NaN, 0.731] on
// sim, and a row holding a NaN a finite cross-entropy (PyTorch: all NaN).
TEST_CASE("a NaN in a row makes its softmax, log_softmax and cross-entropy NaN on every device",
          "[sim][softmax][cross_entropy]") {
  using namespace mt;
  // Short rows (most lanes empty) and a long row with the NaN past the first warp.
  std::vector<double> long_row(300, 0.25);
  long_row[170] = NAN;
  for (const std::vector<double>& row : {std::vector<double>{1, NAN, 2}, std::vector<double>{NAN, -1}, long_row}) {
    const int64_t n = static_cast<int64_t>(row.size());
    for (Device device : {kCPU, test::kCudaPath}) {
      for (DType dtype : {kF32, kBF16}) {
        INFO(device.str() << " " << dtype_name(dtype) << " row of " << n);
        const Tensor x = from_vector(row, {1, n}, dtype, device);
        for (double v : softmax(x, 1).to_vector()) CHECK(std::isnan(v));
        for (double v : log_softmax(x, 1).to_vector()) CHECK(std::isnan(v));
        const Tensor logits = x.detach().requires_grad_();
        const Tensor loss = cross_entropy(logits, from_vector(std::vector<int64_t>{n - 1}, {1}, kI64, device));
        CHECK(std::isnan(loss.item<double>()));
        loss.backward();
        for (double v : logits.grad().to_vector()) CHECK(std::isnan(v));
      }
    }
  }
}

// Catches (PyTorch parity): x - lse with an f32 lse (off by up to 5e-4 at
// logits ~1e4) in the CPU softmax/log_softmax and in the loss and gradient
// of cross-entropy on both devices; subtracting the max first keeps x - max
// exact.
TEST_CASE("softmax, log_softmax and cross-entropy stay precise at logits near 1e4 on every device",
          "[sim][softmax][cross_entropy]") {
  using namespace mt;
  const std::vector<double> offsets = {0, 0.5, 1.25, 3, -2, 0.75};
  const int64_t c = static_cast<int64_t>(offsets.size());
  std::vector<double> row;
  for (double o : offsets) row.push_back(1e4 + o);  // exact in f32
  // f64 references from the offsets (the shared 1e4 cancels exactly).
  double sum_exp = 0;
  for (double o : offsets) sum_exp += std::exp(o);
  const double log_sum = std::log(sum_exp);
  const int64_t target = 2;
  const double eps = 0.1;
  double smoothed = 0;
  for (double o : offsets) smoothed += log_sum - o;
  const double want_loss = (1 - eps) * (log_sum - offsets[target]) + eps / static_cast<double>(c) * smoothed;
  for (Device device : {kCPU, test::kCudaPath}) {
    INFO(device.str());
    const Tensor x = from_vector(row, {1, c}, kF32, device);
    const std::vector<double> ls = log_softmax(x, 1).to_vector(), sm = softmax(x, 1).to_vector();
    for (int64_t i = 0; i < c; ++i) {
      CHECK(ls[static_cast<size_t>(i)] == Approx(offsets[static_cast<size_t>(i)] - log_sum).margin(2e-6));
      CHECK(sm[static_cast<size_t>(i)] == Approx(std::exp(offsets[static_cast<size_t>(i)]) / sum_exp).epsilon(1e-5));
    }
    const Tensor logits = x.detach().requires_grad_();
    CrossEntropyOptions options;
    options.label_smoothing = eps;
    const Tensor loss = cross_entropy(logits, from_vector(std::vector<int64_t>{target}, {1}, kI64, device), options);
    CHECK(loss.item<double>() == Approx(want_loss).epsilon(1e-5));
    loss.backward();
    const std::vector<double> g = logits.grad().to_vector();
    for (int64_t i = 0; i < c; ++i) {
      const double q = (i == target ? 1 - eps : 0) + eps / static_cast<double>(c);
      CHECK(g[static_cast<size_t>(i)] == Approx(std::exp(offsets[static_cast<size_t>(i)]) / sum_exp - q).margin(2e-6));
    }
  }
}

// Catches: relu(NaN) = 0 in the CUDA kernels (the CPU test covers the CPU).
TEST_CASE("relu keeps a NaN and passes its gradient on the CUDA path", "[sim][elementwise]") {
  using namespace mt;
  for (DType dtype : {kF32, kBF16}) {
    INFO(dtype_name(dtype));
    Tensor x = from_vector(std::vector<double>{NAN, -1, 2}, {3}, dtype, test::kCudaPath).requires_grad_();
    const Tensor y = relu(x);
    const std::vector<double> v = y.to_vector();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == 0);
    CHECK(v[2] == 2);
    sum(y).backward();
    CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 1});
  }
}

#include "runtime/sim/runtime.h"

TEST_CASE("row-wise kernels have no shared-memory races (simulator race checker)", "[sim][racecheck][softmax]") {
  const bool was_enabled = mt::simulator::racecheck_enabled();
  mt::simulator::set_racecheck_enabled(true);
  (void)mt::simulator::take_race_reports();
  const int64_t rows = 3, cols = 300;
  std::mt19937 rng(5);
  DeviceLikeBuffer x(KernelDType::F32, rows * cols), y(KernelDType::F32, rows * cols),
      dx(KernelDType::F32, rows * cols);
  DeviceLikeBuffer mean(KernelDType::F32, rows), rstd(KernelDType::F32, rows), dw(KernelDType::F32, cols),
      db(KernelDType::F32, cols);
  DeviceLikeBuffer loss(KernelDType::F32, rows), lse(KernelDType::F32, rows);
  x.fill_random(rng);
  const int64_t target[rows] = {0, 5, 299};
  mt::sim::softmax_forward(KernelDType::F32, x.data(), y.data(), rows, cols, false, {});
  mt::sim::softmax_backward(KernelDType::F32, x.data(), y.data(), dx.data(), rows, cols, true, {});
  mt::sim::layer_norm_forward(KernelDType::F32, x.data(), nullptr, nullptr, 1e-5, y.data(), mean.data(), rstd.data(),
                              rows, cols, {});
  mt::sim::layer_norm_backward(KernelDType::F32, x.data(), x.data(), nullptr, mean.data(), rstd.data(), dx.data(),
                               dw.data(), db.data(), rows, cols, {});
  mt::sim::cross_entropy_forward(KernelDType::F32, x.data(), target, loss.data(), lse.data(), rows, cols, -100, 0.1,
                                 {});
  CHECK(mt::simulator::take_race_reports().empty());
  mt::simulator::set_racecheck_enabled(was_enabled);
}
