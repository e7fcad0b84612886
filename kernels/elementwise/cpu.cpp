// CPU elementwise kernels: load to a contiguous compute buffer (float, or
// double for f64/integers), apply the shared per-element formula from
// kernels/elementwise/math.h, store with one rounding. The f32 GELU (erf)
// runs the same formula through the vectorised erfc/exp of
// kernels/elementwise/vector_gelu.h.
#include "kernels/elementwise/cpu.h"

#include <type_traits>

#include "kernels/common/strided.h"
#include "kernels/elementwise/vector_gelu.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args) {
  Loaded<T> x(in);
  OutputBuffer<T> y(out);
  const T a = static_cast<T>(args.a), b = static_cast<T>(args.b);
  T* py = y.data();
  if constexpr (std::is_same_v<T, float>) {
    if (op == UnaryOp::GeluErf) {  // erfc eight at a time
      parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) { gelu_erf_n(x.data() + begin, py + begin, end - begin); });
      y.commit();
      return;
    }
  }
  kernels::visit_unary(op, [&](auto tag) {
    parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] = kernels::unary_forward<decltype(tag)::value, T>(x[i], a, b);
    });
  });
  y.commit();
}

template <typename T>
void unary_backward_typed(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out,
                          const Tensor& grad_in, UnaryArgs args) {
  Loaded<T> g(grad_out);
  // Ops whose backward needs x or y read them; an undefined tensor means "not needed".
  const Tensor& x_src = in.defined() ? in : grad_out;
  const Tensor& y_src = out.defined() ? out : grad_out;
  Loaded<T> x(x_src), y(y_src);
  OutputBuffer<T> dx(grad_in);
  const T a = static_cast<T>(args.a), b = static_cast<T>(args.b);
  T* pdx = dx.data();
  if constexpr (std::is_same_v<T, float>) {
    if (op == UnaryOp::GeluErf) {  // erfc and exp eight at a time
      parallel_for(grad_in.numel(), 1, [&](int64_t begin, int64_t end) {
        gelu_erf_backward_n(x.data() + begin, g.data() + begin, pdx + begin, end - begin);
      });
      dx.commit();
      return;
    }
  }
  kernels::visit_unary(op, [&](auto tag) {
    parallel_for(grad_in.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        pdx[i] = kernels::unary_backward<decltype(tag)::value, T>(x[i], y[i], g[i], a, b);
    });
  });
  dx.commit();
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  OutputBuffer<T> y(out);
  T* py = y.data();
  // A scalar operand (x * 0.125, x + 1) stays one value instead of a full-size copy.
  visit_operand<T>(a, [&](auto va) {
    visit_operand<T>(b, [&](auto vb) {
      kernels::visit_binary(op, [&](auto tag) {
        parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) py[i] = kernels::binary_forward<decltype(tag)::value, T>(va[i], vb[i]);
        });
      });
    });
  });
  y.commit();
}

void check_same_shape(const char* op, const Tensor& in, const Tensor& out) {
  MT_CHECK(in.sizes() == out.sizes(), "{}: input shape {} does not match output shape {}", op, in.shape_string(),
           out.shape_string());
}

}  // namespace

void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args) {
  check_same_shape("unary", in, out);
  if (computes_in_double(in.dtype()) || computes_in_double(out.dtype())) {
    unary_typed<double>(op, in, out, args);
  } else {
    unary_typed<float>(op, in, out, args);
  }
}

void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out, const Tensor& grad_in,
                    UnaryArgs args) {
  check_same_shape("unary_backward", grad_out, grad_in);
  if (computes_in_double(grad_in.dtype())) {
    unary_backward_typed<double>(op, grad_out, in, out, grad_in, args);
  } else {
    unary_backward_typed<float>(op, grad_out, in, out, grad_in, args);
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_shape("binary", a, out);
  check_same_shape("binary", b, out);
  if (computes_in_double(a.dtype()) || computes_in_double(b.dtype()) || computes_in_double(out.dtype())) {
    binary_typed<double>(op, a, b, out);
  } else {
    binary_typed<float>(op, a, b, out);
  }
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_shape("where", cond, out);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    Loaded<float> c(cond);
    OutputBuffer<T> y(out);
    T* py = y.data();
    const int64_t n = out.numel();  // hoisted: numel() walks the shape, and the stores may alias it
    // A fill value (the -inf of a mask, the 0 of a gradient) stays one value.
    visit_operand<T>(a, [&](auto va) {
      visit_operand<T>(b, [&](auto vb) {
        parallel_for(n, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) py[i] = c[i] != 0.0f ? va[i] : vb[i];
        });
      });
    });
    y.commit();
  };
  if (computes_in_double(out.dtype())) {
    run(double{});
  } else {
    run(float{});
  }
}

void fill(const Tensor& out, double value) {
  const Tensor v = full({}, value, out.dtype(), out.device());
  cpu::copy(make_view(v, out.sizes(), Shape(out.sizes().size(), 0), 0), out);
}

}  // namespace mt::kernels::cpu
