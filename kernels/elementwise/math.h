// Per-element math shared by the CPU backend and the CUDA kernels.
//
// Each op's forward and backward formula lives here once, as __host__
// __device__ templates over the compute type (float for f32/f16/bf16, double
// for f64), so the CPU tests check the very formulas the GPU runs.
//
// The op lists below name each op once: they generate enum class UnaryOp /
// BinaryOp, visit_unary / visit_binary's cases and unary_backward_reads().
// A new unary op is a row of MT_UNARY_OPS (with what its derivative reads)
// plus its formulas in unary_forward and unary_backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "runtime/macros.h"

namespace mt::kernels {

// X(Op, what unary_backward<Op> reads: Nothing, Input or Output). The order
// is the enum's.
// clang-format off
#define MT_UNARY_OPS(X)                     \
  X(Neg, Nothing)                           \
  X(Exp, Output)                            \
  X(Log, Input)                             \
  X(Sqrt, Output)                           \
  X(Rsqrt, Output)                          \
  X(Abs, Input)                             \
  X(Sign, Nothing)                          \
  X(Reciprocal, Output)                     \
  X(Square, Input)                          \
  X(Relu, Output)                           \
  X(GeluTanh, Input)                        \
  X(GeluErf, Input)                         \
  X(Silu, Input)                            \
  X(Tanh, Output)                           \
  X(Sigmoid, Output)                        \
  X(PowScalar, Input)   /* x^a */           \
  X(Clamp, Input)       /* clamp(x, a, b) */\
  X(Sin, Input)                             \
  X(Cos, Input)

// X(Op); the comparisons come last (is_comparison).
#define MT_BINARY_OPS(X) \
  X(Add)                 \
  X(Sub)                 \
  X(Mul)                 \
  X(Div)                 \
  X(Pow)                 \
  X(Maximum)             \
  X(Minimum)             \
  X(Eq)                  \
  X(Ne)                  \
  X(Lt)                  \
  X(Le)                  \
  X(Gt)                  \
  X(Ge)
// clang-format on

enum class UnaryOp : uint8_t {
#define MT_UNARY_ENUM(name, reads) name,
  MT_UNARY_OPS(MT_UNARY_ENUM)
#undef MT_UNARY_ENUM
};

enum class BinaryOp : uint8_t {
#define MT_BINARY_ENUM(name) name,
  MT_BINARY_OPS(MT_BINARY_ENUM)
#undef MT_BINARY_ENUM
};

// Scalar arguments of parameterised unary ops.
struct UnaryArgs {
  double a = 0;
  double b = 0;
};

inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)

template <typename T>
MT_HOST_DEVICE inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <UnaryOp Op, typename T>
MT_HOST_DEVICE inline T unary_forward(T x, T a, T b) {
  if constexpr (Op == UnaryOp::Neg) return -x;
  if constexpr (Op == UnaryOp::Exp) return std::exp(x);
  if constexpr (Op == UnaryOp::Log) return std::log(x);
  if constexpr (Op == UnaryOp::Sqrt) return std::sqrt(x);
  if constexpr (Op == UnaryOp::Rsqrt) return T(1) / std::sqrt(x);
  if constexpr (Op == UnaryOp::Abs) return std::fabs(x);
  if constexpr (Op == UnaryOp::Sign) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  if constexpr (Op == UnaryOp::Reciprocal) return T(1) / x;
  if constexpr (Op == UnaryOp::Square) return x * x;
  // NaN stays NaN, as in PyTorch; `|`, not `||`: without the branch the CPU loops vectorise.
  if constexpr (Op == UnaryOp::Relu) return ((x > T(0)) | (x != x)) ? x : T(0);
  // GELU as x * Phi(x), with Phi written so it never cancels for negative x:
  // 0.5 (1 + erf(x / sqrt 2)) = 0.5 erfc(-x / sqrt 2), and the tanh form's
  // 0.5 (1 + tanh(u)) = sigmoid(2u). (1 + erf(...) loses ~3 digits at x = -2.5,
  // which PyTorch 1.13's CPU kernels do.)
  if constexpr (Op == UnaryOp::GeluTanh) {
    const T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return x * sigmoid(T(2) * inner);
  }
  if constexpr (Op == UnaryOp::GeluErf) return T(0.5) * x * std::erfc(-x * T(kInvSqrt2));
  if constexpr (Op == UnaryOp::Silu) return x * sigmoid(x);
  if constexpr (Op == UnaryOp::Tanh) return std::tanh(x);
  if constexpr (Op == UnaryOp::Sigmoid) return sigmoid(x);
  if constexpr (Op == UnaryOp::PowScalar) return std::pow(x, a);
  if constexpr (Op == UnaryOp::Clamp) return x < a ? a : (x > b ? b : x);  // NaN passes through
  if constexpr (Op == UnaryOp::Sin) return std::sin(x);
  if constexpr (Op == UnaryOp::Cos) return std::cos(x);
  return x;
}

// Which forward values unary_backward<Op> reads: the autograd op saves only
// those (the tinygrad discipline: a derivative written in terms of its output
// keeps no input alive).
struct UnaryBackwardReads {
  bool input = false, output = false;
};
inline constexpr UnaryBackwardReads kUnaryReadsNothing{false, false};
inline constexpr UnaryBackwardReads kUnaryReadsInput{true, false};
inline constexpr UnaryBackwardReads kUnaryReadsOutput{false, true};
constexpr UnaryBackwardReads unary_backward_reads(UnaryOp op) {
  switch (op) {
#define MT_UNARY_READS(name, reads) \
  case UnaryOp::name: return kUnaryReads##reads;
    MT_UNARY_OPS(MT_UNARY_READS)
#undef MT_UNARY_READS
  }
  return {true, true};
}

// dL/dx given the input x, the forward output y and the incoming gradient g.
template <UnaryOp Op, typename T>
MT_HOST_DEVICE inline T unary_backward(T x, T y, T g, T a, T b) {
  if constexpr (Op == UnaryOp::Neg) return -g;
  if constexpr (Op == UnaryOp::Exp) return g * y;
  if constexpr (Op == UnaryOp::Log) return g / x;
  if constexpr (Op == UnaryOp::Sqrt) return g * T(0.5) / y;
  if constexpr (Op == UnaryOp::Rsqrt) return g * T(-0.5) * y * y * y;
  // g * sign(x), as PyTorch: a NaN or inf gradient at x = 0 stays NaN (0 * NaN).
  if constexpr (Op == UnaryOp::Abs) return g * (x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)));
  if constexpr (Op == UnaryOp::Sign) return T(0);
  // PyTorch's order: y * y first, so a zero gradient times an overflowing y^2 is NaN there too.
  if constexpr (Op == UnaryOp::Reciprocal) return -g * (y * y);
  if constexpr (Op == UnaryOp::Square) return g * T(2) * x;
  // PyTorch's threshold_backward: zero where y <= 0 (exactly where x <= 0), so a NaN passes g on.
  if constexpr (Op == UnaryOp::Relu) return y <= T(0) ? T(0) : g;
  if constexpr (Op == UnaryOp::GeluTanh) {
    // d/dx [x s(2u)] = s + 2 x s (1 - s) u', with s = sigmoid(2u) and 1 - s = sigmoid(-2u).
    const T x2 = x * x;
    const T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x2 * x);
    const T s = sigmoid(T(2) * inner), not_s = sigmoid(T(-2) * inner);
    const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x2);
    return g * (s + T(2) * x * s * not_s * dinner);
  }
  if constexpr (Op == UnaryOp::GeluErf) {
    const T cdf = T(0.5) * std::erfc(-x * T(kInvSqrt2));
    const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
  if constexpr (Op == UnaryOp::Silu) {
    const T s = sigmoid(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
  if constexpr (Op == UnaryOp::Tanh) return g * (T(1) - y * y);
  if constexpr (Op == UnaryOp::Sigmoid) return g * y * (T(1) - y);
  if constexpr (Op == UnaryOp::PowScalar) return a == T(0) ? T(0) : g * a * std::pow(x, a - T(1));
  if constexpr (Op == UnaryOp::Clamp) return (x >= a && x <= b) ? g : T(0);
  if constexpr (Op == UnaryOp::Sin) return g * std::cos(x);
  if constexpr (Op == UnaryOp::Cos) return -g * std::sin(x);
  return g;
}

template <BinaryOp Op, typename T>
MT_HOST_DEVICE inline T binary_forward(T a, T b) {
  if constexpr (Op == BinaryOp::Add) return a + b;
  if constexpr (Op == BinaryOp::Sub) return a - b;
  if constexpr (Op == BinaryOp::Mul) return a * b;
  if constexpr (Op == BinaryOp::Div) return a / b;
  if constexpr (Op == BinaryOp::Pow) return std::pow(a, b);
  // maximum/minimum propagate NaN like torch.maximum.
  if constexpr (Op == BinaryOp::Maximum) return (a != a || a > b) ? a : b;
  if constexpr (Op == BinaryOp::Minimum) return (a != a || a < b) ? a : b;
  if constexpr (Op == BinaryOp::Eq) return a == b ? T(1) : T(0);
  if constexpr (Op == BinaryOp::Ne) return a != b ? T(1) : T(0);
  if constexpr (Op == BinaryOp::Lt) return a < b ? T(1) : T(0);
  if constexpr (Op == BinaryOp::Le) return a <= b ? T(1) : T(0);
  if constexpr (Op == BinaryOp::Gt) return a > b ? T(1) : T(0);
  if constexpr (Op == BinaryOp::Ge) return a >= b ? T(1) : T(0);
  return a;
}

constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Calls fn(std::integral_constant<UnaryOp, op>{}) so the loop a backend runs
// is instantiated once per op with the op known at compile time. Host code;
// the CPU kernels and the CUDA launchers share it.
template <typename Fn>
inline void visit_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
#define MT_UNARY_CASE(name, reads) \
  case UnaryOp::name: return fn(std::integral_constant<UnaryOp, UnaryOp::name>{});
    MT_UNARY_OPS(MT_UNARY_CASE)
#undef MT_UNARY_CASE
  }
}

// The same for binary ops.
template <typename Fn>
inline void visit_binary(BinaryOp op, Fn&& fn) {
  switch (op) {
#define MT_BINARY_CASE(name) \
  case BinaryOp::name: return fn(std::integral_constant<BinaryOp, BinaryOp::name>{});
    MT_BINARY_OPS(MT_BINARY_CASE)
#undef MT_BINARY_CASE
  }
}

}  // namespace mt::kernels
