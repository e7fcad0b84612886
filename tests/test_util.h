// Shared helpers for the op tests: seeded f64 inputs, element-wise closeness
// checks that name the first bad element, naive f64 reference helpers
// (broadcasting, reductions), the low-precision (f16/bf16 vs f32) harness and a
// gradcheck wrapper that prints gradcheck's message on failure.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mixtape.h"

namespace mt::test {

// ---------------------------------------------------------------- tolerances
// Closeness is |got - want| <= atol + rtol * |want|; inputs are O(1), so the
// low-precision checks use the same number for atol and rtol.

// f64 forward against the naive f64 reference: both sides compute in double,
// only the order of operations (and libm vs. formula) differs.
inline constexpr double kF64Tol = 1e-12;
// f32 against f64: f32's unit roundoff is 2^-24 ~ 6e-8; the shapes here are
// small (sums of <= ~50 terms), so 1e-5 is a wide but meaningful bound.
inline constexpr double kF32Tol = 1e-5;
// f16 against f32: f16 keeps 10 mantissa bits (eps = 2^-10 ~ 9.8e-4). The
// inputs are rounded once (<= 2^-11 relative), the op accumulates in f32 and
// rounds once on store: 1e-2 (~10 f16 ulps) covers that with room for the
// condition number of ops like exp(x) on |x| <= 3.
inline constexpr double kF16Tol = 1e-2;
// bf16 against f32: bf16 keeps only 7 mantissa bits (eps = 2^-7 ~ 7.8e-3), 8x
// coarser than f16. The same ulp budget as f16 (8 ulps) gives 2^-4 = 6.25e-2.
inline constexpr double kBF16Tol = 6.25e-2;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// ---------------------------------------------------------------- inputs

inline Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kF64, kCPU, &gen);
}

// Uniform in [lo, hi): for ops with a restricted domain (log, sqrt, div, ...).
inline Tensor uniform64(const Shape& shape, double lo, double hi, uint64_t seed) {
  Generator gen(seed);
  return uniform(shape, lo, hi, kF64, kCPU, &gen);
}

inline Tensor f64(const std::vector<double>& values, const Shape& shape) { return from_vector(values, shape, kF64); }

inline Tensor i64(const std::vector<int64_t>& values, const Shape& shape) { return from_vector(values, shape, kI64); }

// ---------------------------------------------------------------- index helpers

// The coordinates of flat (row-major) element i of `shape`.
inline Shape unravel(int64_t i, const Shape& shape) {
  Shape coord(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coord[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return coord;
}

// The flat index in `shape` of a coordinate of the (larger) broadcast shape:
// leading dims are dropped and size-1 dims read index 0.
inline int64_t broadcast_index(const Shape& coord, const Shape& shape) {
  const size_t lead = coord.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : coord[lead + d]);
  return flat;
}

inline Shape broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------------------------------------------------------- naive references

inline std::vector<double> ref_map(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double v : x.to_vector()) out.push_back(f(v));
  return out;
}

// f(a, b) over the broadcast shape of a and b, row-major.
inline std::vector<double> ref_zip(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape shape = broadcast(a.sizes(), b.sizes());
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  std::vector<double> out;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    const Shape c = unravel(i, shape);
    out.push_back(f(va[static_cast<size_t>(broadcast_index(c, a.sizes()))],
                    vb[static_cast<size_t>(broadcast_index(c, b.sizes()))]));
  }
  return out;
}

// Reduces `x` over `dims` (empty = all) with f(values of one output element,
// in row-major order of the reduced dims); outputs in row-major order of the kept dims.
inline std::vector<double> ref_reduce(const Tensor& x, Shape dims,
                                      const std::function<double(const std::vector<double>&)>& f) {
  const Shape& shape = x.sizes();
  const auto nd = static_cast<int64_t>(shape.size());
  if (dims.empty()) {
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  }
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  Shape kept_shape, red_shape;
  for (size_t d = 0; d < shape.size(); ++d) (reduced[d] ? red_shape : kept_shape).push_back(shape[d]);
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (int64_t o = 0; o < shape_numel(kept_shape); ++o) {
    const Shape kc = unravel(o, kept_shape);
    std::vector<double> group;
    for (int64_t r = 0; r < shape_numel(red_shape); ++r) {
      const Shape rc = unravel(r, red_shape);
      int64_t flat = 0;
      size_t ki = 0, ri = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (reduced[d] ? rc[ri++] : kc[ki++]);
      group.push_back(v[static_cast<size_t>(flat)]);
    }
    out.push_back(f(group));
  }
  return out;
}

// ---------------------------------------------------------------- closeness checks

inline std::string describe_element(int64_t i, const Shape& shape) {
  return fmt::format("element {} (index {})", i, shape_str(unravel(i, shape)));
}

// Every element of `got` within atol + rtol * |want|; NaN matches NaN and
// inf matches an equal inf. Reports only the first mismatch, naming it.
inline void check_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                        const std::string& what = "") {
  const std::vector<double> g = got.to_vector();
  INFO(what);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(want[i]);
    const bool same_inf = std::isinf(want[i]) && g[i] == want[i];
    const double diff = std::fabs(g[i] - want[i]);
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(both_nan || same_inf || diff <= tol)) {
      FAIL_CHECK(fmt::format("{} {}: got {:.17g}, want {:.17g} (|diff| {:.3g} > tol {:.3g}) [{}]", what,
                             describe_element(static_cast<int64_t>(i), got.sizes()), g[i], want[i], diff, tol,
                             dtype_name(got.dtype())));
      return;
    }
  }
}

inline void check_close(const Tensor& got, const std::vector<double>& want, double tol = kF64Tol,
                        const std::string& what = "") {
  check_close(got, want, tol, tol, what);
}

// Same shape and close values.
inline void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what = "") {
  INFO(what);
  REQUIRE(shape_str(got.sizes()) == shape_str(want.sizes()));
  check_close(got, want.to_vector(), tol, tol, what);
}

// Same shape and exactly equal values (views, casts to wider types, indices, bools).
inline void check_equal(const Tensor& got, const std::vector<double>& want, const std::string& what = "") {
  check_close(got, want, 0.0, 0.0, what);
}

// ---------------------------------------------------------------- low precision

// Runs fn on F64, F32, F16 and BF16 casts of the floating inputs (integer and
// bool inputs pass unchanged) and checks: f32 against f64 within kF32Tol, and
// f16 / bf16 against the f32 result within their tolerances. The same goes
// for the gradients of sum(fn(x) * r) for a fixed random r, which come back in
// each input's own dtype. Failures name the dtype, the input and the element.
inline void check_low_precision(const Fn& fn, const std::vector<Tensor>& inputs, const std::string& what,
                                double f16_tol = kF16Tol, double bf16_tol = kBF16Tol) {
  struct Run {
    Tensor out;
    std::vector<Tensor> grads;  // per floating input
  };
  auto run = [&](DType dtype) {
    std::vector<Tensor> cast;
    for (const Tensor& t : inputs) {
      if (!t.defined() || !is_floating(t.dtype())) {
        cast.push_back(t);
        continue;
      }
      Tensor leaf = t.to(dtype).detach();
      cast.push_back(leaf.requires_grad_());
    }
    Run r{fn(cast), {}};
    if (r.out.requires_grad()) {
      sum(mul(r.out, randn64(r.out.sizes(), 4242).to(r.out.dtype()))).backward();
    }
    for (const Tensor& t : cast) {
      if (t.defined() && is_floating(t.dtype())) {
        CHECK((!t.grad().defined() || t.grad().dtype() == dtype));
        r.grads.push_back(t.grad());
      }
    }
    r.out = r.out.detach();
    return r;
  };
  auto compare = [&](const Run& got, const Run& want, double tol, const std::string& label) {
    check_close(got.out, want.out, tol, what + " " + label);
    for (size_t i = 0; i < got.grads.size(); ++i) {
      INFO(what << " " << label << ": gradient of input " << i);
      REQUIRE(got.grads[i].defined() == want.grads[i].defined());
      if (got.grads[i].defined()) {
        check_close(got.grads[i], want.grads[i], tol, fmt::format("{} {} grad of input {}", what, label, i));
      }
    }
  };
  const Run ref64 = run(kF64);
  const Run ref32 = run(kF32);
  compare(ref32, ref64, kF32Tol, "f32 vs f64");
  const Run h = run(kF16);
  CHECK(is_floating(h.out.dtype()));
  compare(h, ref32, f16_tol, "f16 vs f32");
  const Run b = run(kBF16);
  compare(b, ref32, bf16_tol, "bf16 vs f32");
}

// ---------------------------------------------------------------- gradcheck

// Makes every (f64) input a leaf that requires grad and runs gradcheck,
// printing the first mismatch when it fails.
inline void require_gradcheck(const Fn& fn, const std::vector<Tensor>& inputs, const std::string& what = "",
                              const GradcheckOptions& options = {}) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.defined() ? t.detach() : Tensor();
    if (leaf.defined()) leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  const GradcheckResult r = gradcheck(fn, leaves, options);
  INFO(what << ": " << r.message);
  REQUIRE(r.ok);
}

// Bytes allocated on `device` after `op` ran with autograd, minus the same
// without: what the graph holds beyond the output the caller keeps. The
// inputs are non-leaf intermediates (x * 1, which saves nothing), so an op
// that saves an input is what keeps it alive.
inline int64_t saved_bytes(Device device, const std::vector<Shape>& shapes,
                           const std::function<Tensor(const std::vector<Tensor>&)>& op, DType dtype = kF32) {
  auto run = [&](bool grad) {
    std::vector<Tensor> leaves;
    for (const Shape& s : shapes) leaves.push_back(full(s, 0.75, dtype, device).requires_grad_(grad));
    const int64_t before = memory_stats(device).current_bytes;
    Tensor out;
    {
      std::vector<Tensor> inputs;
      for (const Tensor& l : leaves) inputs.push_back(mul(l, 1.0));
      out = op(inputs);
    }
    return memory_stats(device).current_bytes - before;
  };
  const int64_t with_graph = run(true);
  NoGradGuard no_grad;
  return with_graph - run(false);
}

}  // namespace mt::test
