// CPU elementwise kernels: load to a contiguous compute buffer (float, or
// double for f64/integers), apply the shared per-element formula from
// kernels/elementwise/math.h, store with one rounding. The f32 ops that
// call transcendentals (exp, log, tanh, sigmoid, SiLU, the GELUs) run the
// same formulas through the vectorised exp/log/tanh/erfc of
// kernels/elementwise/vector_unary.h.
#include "kernels/elementwise/cpu.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/common/half_runs.h"
#include "kernels/common/strided.h"
#include "kernels/elementwise/vector_unary.h"

namespace mt::kernels::cpu {
namespace {

// BF16 (and F16) end to end. When every tensor of an op is contiguous in
// one 16-bit dtype (or, for an operand, one broadcast value), the kernel
// reads and writes that dtype a block of kHalfBlock values at a time through
// f32 buffers on the stack: the f32 copy stays in the cache instead of a
// full-size f32 gather before the op and a scatter after it (13-18% of a
// bf16 training step, perf; under f16 autocast a quarter of a cnn step).
// The math is the same f32 formula, rounded once on store.
constexpr int64_t kHalfBlock = 512;

bool is_half(DType dtype) { return dtype == kBF16 || dtype == kF16; }

bool is_contiguous_as(const Tensor& t, DType dtype) { return t.dtype() == dtype && t.is_contiguous(); }

// An operand of a block loop writing `out` (bf16 or f16): its own elements
// in out's dtype, or one broadcast value (in out's dtype, or the f32 scalar a
// Python-style `x * 0.5` carries: 16-bit math runs in f32, so the scalar is
// not rounded first, as in PyTorch); in out's memory only as out itself (an
// op in place: each block is read before it is written), never shifted or as
// a value some block overwrites.
bool block_operand(const Tensor& t, const Tensor& out) {
  const bool elements = is_contiguous_as(t, out.dtype());
  const bool scalar = (t.dtype() == out.dtype() || t.dtype() == kF32) && is_broadcast_scalar(t);
  if (!elements && !scalar) return false;
  return t.storage() != out.storage() || (elements && t.offset() == out.offset());
}

// A broadcast operand's one value, as f32 (exact from bf16, f16 and f32).
float broadcast_value(const Tensor& t) {
  if (t.dtype() == kF32) return *static_cast<const float*>(t.data_ptr());
  if (t.dtype() == kF16) return static_cast<float>(static_cast<const Half*>(t.data_ptr())[0]);
  return static_cast<float>(static_cast<const BFloat16*>(t.data_ptr())[0]);
}

// Runs body(inputs, y, m) over out's elements a block at a time: inputs[k]
// holds block values of ins[k] widened to f32 (a broadcast operand: its one
// value repeated), y receives the block's f32 results, narrowed into out
// (of storage type S: BFloat16 or Half). The conversions run eight lanes at
// a time (kernels/common/half_runs.h): with GCC's scalar narrowing a bf16
// add of [128, 32, 28, 28] took 1.06-1.11 ms against 0.42 for an f32
// multiply of twice the bytes.
template <typename S, size_t N, typename Body>
void half_blocks_as(const std::array<const Tensor*, N>& ins, const Tensor& out, Body&& body) {
  S* po = static_cast<S*>(out.data_ptr());
  parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
    float in[N][kHalfBlock], y[kHalfBlock];
    for (size_t k = 0; k < N; ++k) {
      if (!is_contiguous_as(*ins[k], out.dtype())) std::fill_n(in[k], kHalfBlock, broadcast_value(*ins[k]));
    }
    for (int64_t b = begin; b < end; b += kHalfBlock) {
      const int64_t m = std::min(kHalfBlock, end - b);
      for (size_t k = 0; k < N; ++k) {
        if (is_contiguous_as(*ins[k], out.dtype())) widen_run(static_cast<const S*>(ins[k]->data_ptr()) + b, in[k], m);
      }
      body(in, y, m);
      narrow_run(y, po + b, m);
    }
  });
  out.storage()->bump_version();
}

template <size_t N, typename Body>
void half_blocks(const std::array<const Tensor*, N>& ins, const Tensor& out, Body&& body) {
  if (out.dtype() == kF16) {
    half_blocks_as<Half>(ins, out, std::forward<Body>(body));
  } else {
    half_blocks_as<BFloat16>(ins, out, std::forward<Body>(body));
  }
}

// ReLU selects its input or zero, so on bf16 and f16 it can work on the
// bits where they lie, sixteen lanes to an AVX2 register, with no f32 round
// trip: the block path took longer for a bf16 ReLU than the f32 one
// (cpu_cnn_ops_bench), and a scalar loop over the bits mispredicted the
// sign of every other element. Both formats keep the sign in the top bit and
// differ only in where infinity's bits end (bf16 0x7f80, f16 0x7c00). The
// same bits as the block path: a NaN comes out as the canonical 0x7fff its
// rounding gives, -0 as +0.
struct HalfBits {
  uint16_t infinity;  // the magnitude bits of +inf: anything above is NaN
  bool is_nan(uint16_t v) const { return (v & 0x7fffu) > infinity; }
  bool at_most_zero(uint16_t v) const { return (v & 0x7fffu) == 0 || ((v & 0x8000u) != 0 && !is_nan(v)); }
};

HalfBits half_bits(DType dtype) { return {static_cast<uint16_t>(dtype == kF16 ? 0x7c00u : 0x7f80u)}; }

// out[i] = 0 where sel[i] <= 0 (not NaN), else value[i] (NaN canonical).
void relu_select(HalfBits format, const uint16_t* sel, const uint16_t* value, uint16_t* out, int64_t begin,
                 int64_t end) {
  int64_t i = begin;
#if defined(__AVX2__)
  const __m256i magnitude_bits = _mm256_set1_epi16(0x7fff);
  const __m256i infinity = _mm256_set1_epi16(static_cast<int16_t>(format.infinity));
  const __m256i zero = _mm256_setzero_si256();
  for (; i + 16 <= end; i += 16) {
    const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sel + i));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(value + i));
    const __m256i s_magnitude = _mm256_and_si256(s, magnitude_bits);  // 0..0x7fff: signed compares hold
    const __m256i s_nan = _mm256_cmpgt_epi16(s_magnitude, infinity);
    const __m256i s_negative = _mm256_cmpgt_epi16(zero, s);
    const __m256i drop = _mm256_or_si256(_mm256_cmpeq_epi16(s_magnitude, zero), _mm256_andnot_si256(s_nan, s_negative));
    const __m256i v_nan = _mm256_cmpgt_epi16(_mm256_and_si256(v, magnitude_bits), infinity);
    const __m256i kept = _mm256_blendv_epi8(v, magnitude_bits, v_nan);  // 0x7fff: the canonical NaN
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_andnot_si256(drop, kept));
  }
#endif
  for (; i < end; ++i) {
    out[i] = format.at_most_zero(sel[i]) ? uint16_t{0} : format.is_nan(value[i]) ? uint16_t{0x7fff} : value[i];
  }
}

const uint16_t* half_bits_of(const Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); }

// out = relu(in) (sel = value = in), or the gradient g where y > 0 (sel = y,
// value = g: math.h's rule, a NaN y passes g on); bf16 or f16, all one dtype.
void relu_half(const Tensor& sel, const Tensor& value, const Tensor& out) {
  const uint16_t* s = half_bits_of(sel);
  const uint16_t* v = half_bits_of(value);
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const HalfBits format = half_bits(out.dtype());
  parallel_for(out.numel(), 1,
               [format, s, v, o](int64_t begin, int64_t end) { relu_select(format, s, v, o, begin, end); });
  out.storage()->bump_version();
}

bool unary_half(UnaryOp op, const Tensor& in, const Tensor& out, float a, float b) {
  if (!is_half(out.dtype()) || !out.is_contiguous() || !is_contiguous_as(in, out.dtype()) || !block_operand(in, out)) {
    return false;
  }
  if (op == UnaryOp::Relu) {
    relu_half(in, in, out);
    return true;
  }
  if (const UnaryForwardN vector_op = vector_unary_forward(op, /*to_16bit=*/true)) {
    half_blocks<1>({&in}, out, [vector_op](const auto& x, float* y, int64_t m) { vector_op(x[0], y, m); });
    return true;
  }
  kernels::visit_unary(op, [&](auto tag) {
    half_blocks<1>({&in}, out, [a, b](const auto& x, float* __restrict y, int64_t m) {
      const float* __restrict xs = x[0];
      for (int64_t i = 0; i < m; ++i) y[i] = kernels::unary_forward<decltype(tag)::value, float>(xs[i], a, b);
    });
  });
  return true;
}

// g, then x or y where the op reads them (else g again: never read).
bool unary_backward_half(UnaryOp op, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& dx, float a,
                         float b) {
  if (!is_half(dx.dtype()) || !dx.is_contiguous()) return false;
  for (const Tensor* t : {&g, &x, &y}) {
    if (!is_contiguous_as(*t, dx.dtype()) || !block_operand(*t, dx)) return false;
  }
  if (op == UnaryOp::Relu) {
    relu_half(y, g, dx);
    return true;
  }
  if (const UnaryBackwardN vector_op = vector_unary_backward(op, /*to_16bit=*/true)) {
    half_blocks<2>({&g, &x}, dx,
                   [vector_op](const auto& in, float* out, int64_t m) { vector_op(in[1], in[0], out, m); });
    return true;
  }
  kernels::visit_unary(op, [&](auto tag) {
    half_blocks<3>({&g, &x, &y}, dx, [a, b](const auto& in, float* __restrict out, int64_t m) {
      const float* __restrict gs = in[0], * __restrict xs = in[1], * __restrict ys = in[2];
      for (int64_t i = 0; i < m; ++i) {
        out[i] = kernels::unary_backward<decltype(tag)::value, float>(xs[i], ys[i], gs[i], a, b);
      }
    });
  });
  return true;
}

bool binary_half(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!is_half(out.dtype()) || !out.is_contiguous() || !block_operand(a, out) || !block_operand(b, out)) return false;
  kernels::visit_binary(op, [&](auto tag) {
    half_blocks<2>({&a, &b}, out, [&](const auto& in, float* y, int64_t m) {
      for (int64_t i = 0; i < m; ++i) y[i] = kernels::binary_forward<decltype(tag)::value, float>(in[0][i], in[1][i]);
    });
  });
  return true;
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args) {
  Loaded<T> x(in);
  OutputBuffer<T> y(out);
  const T a = static_cast<T>(args.a), b = static_cast<T>(args.b);
  T* py = y.data();
  if constexpr (std::is_same_v<T, float>) {
    // exp, log, tanh or erfc eight at a time (for a 16-bit output, the erfc its block path takes too)
    if (const UnaryForwardN vector_op = vector_unary_forward(op, out.dtype() == kBF16 || out.dtype() == kF16)) {
      parallel_for(out.numel(), 1,
                   [&](int64_t begin, int64_t end) { vector_op(x.data() + begin, py + begin, end - begin); });
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
    if (const UnaryBackwardN vector_op =
            vector_unary_backward(op, grad_in.dtype() == kBF16 || grad_in.dtype() == kF16)) {
      parallel_for(grad_in.numel(), 1, [&](int64_t begin, int64_t end) {
        vector_op(x.data() + begin, g.data() + begin, pdx + begin, end - begin);
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
  if (unary_half(op, in, out, static_cast<float>(args.a), static_cast<float>(args.b))) return;
  if (computes_in_double(in.dtype()) || computes_in_double(out.dtype())) {
    unary_typed<double>(op, in, out, args);
  } else {
    unary_typed<float>(op, in, out, args);
  }
}

void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out, const Tensor& grad_in,
                    UnaryArgs args) {
  check_same_shape("unary_backward", grad_out, grad_in);
  const Tensor& x = in.defined() ? in : grad_out;  // what the op does not read: never read
  const Tensor& y = out.defined() ? out : grad_out;
  if (unary_backward_half(op, grad_out, x, y, grad_in, static_cast<float>(args.a), static_cast<float>(args.b))) return;
  if (computes_in_double(grad_in.dtype())) {
    unary_backward_typed<double>(op, grad_out, in, out, grad_in, args);
  } else {
    unary_backward_typed<float>(op, grad_out, in, out, grad_in, args);
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_shape("binary", a, out);
  check_same_shape("binary", b, out);
  if (binary_half(op, a, b, out)) return;
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
