// Elementwise ops: forward through kernels/elementwise/elementwise.h, backward rules here.
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/op_helpers.h"
#include "kernels/elementwise/elementwise.h"

namespace mt {

using autograd::broadcast_view;
using autograd::record;
using autograd::save;
using kernels::BinaryOp;
using kernels::UnaryArgs;
using kernels::UnaryOp;

namespace {

Tensor run_binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, DType out_dtype) {
  autograd::check_same_device(name, a, b);
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(shape, out_dtype, a.device());
  kernels::binary(op, broadcast_view(a, shape), broadcast_view(b, shape), out);
  return out;
}

// PyTorch casts a 0-dim tensor operand to the op's common dtype before it
// computes: f16[4] + f32[] rounds the f32 value to f16 first, which can move
// the result by one f16 ulp from computing in f32 and rounding once. Only a
// 0-dim operand can be wider than the common dtype (or an integer under a
// float one); every other operand converts exactly, so is left as it is.
// Python-scalar forms (add(a, 0.1), eq(a, 0.1)) never come here: mixtape
// applies a scalar unrounded, in f32 (ops.h).
Tensor as_common_dtype(const Tensor& t, DType common) {
  const bool exact = t.dtype() == common || (is_floating(t.dtype()) && promote_types(t.dtype(), common) == common);
  return t.dim() == 0 && is_floating(common) && !exact ? autograd::cast_to_dtype(t, common) : t;
}

// The tensor-tensor forms: both operands as PyTorch computes them.
Tensor run_binary_tensors(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, DType out_dtype) {
  const DType common = autograd::binary_result_type(a, b);
  return run_binary(op, name, as_common_dtype(a, common), as_common_dtype(b, common), out_dtype);
}

DType arithmetic_result_type(BinaryOp op, const Tensor& a, const Tensor& b) {
  const DType t = autograd::binary_result_type(a, b);
  // True division (and pow with a float operand) of integers gives a float, as in PyTorch.
  if (op == BinaryOp::Div && !is_floating(t)) return kF32;
  return t;
}

// What a binary rule reads in backward, given which inputs need a gradient.
struct BinarySaves {
  bool a = false, b = false, out = false;
};

// The differentiable binary ops share one recorder. `saves(need_a, need_b)`
// says which of a, b and the output the rule reads; only those are kept for
// backward (the rest arrive undefined). `rule(g, a, b, out, need_a, need_b)`
// returns (ga, gb), undefined where not needed.
// The inputs first go through the op's autocast row (`policy`).
template <typename Saves, typename Rule>
Tensor binary_differentiable(BinaryOp op, amp::Op policy, const Tensor& a_in, const Tensor& b_in, Saves saves,
                             Rule rule) {
  const autograd::CastInputs in = autograd::autocast_inputs(policy, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  Tensor out = run_binary_tensors(op, in.name(), a, b, arithmetic_result_type(op, a, b));
  if (!autograd::needs_grad({a, b})) return out;
  const bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
  const BinarySaves keep = saves(need_a, need_b);
  // saves: what the op's saves(need_a, need_b) names of a, b and the output (each op's row below)
  return record(
      in, out,
      [sa = save(keep.a ? a : Tensor()), sb = save(keep.b ? b : Tensor()), so = save(keep.out ? out : Tensor()),
       a_shape = a.sizes(), b_shape = b.sizes(), need_a, need_b, rule](const Tensor& g) -> std::vector<Tensor> {
        auto [ga, gb] = rule(g, sa.get(), sb.get(), so.get(), need_a, need_b);
        return {need_a && ga.defined() ? sum_to_size(ga, a_shape) : Tensor(),
                need_b && gb.defined() ? sum_to_size(gb, b_shape) : Tensor()};
      },
      keep.a || keep.b || keep.out);
}

Tensor compare(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  return run_binary_tensors(op, name, a, b, kBool);
}

// A comparison with a Python scalar: the scalar unrounded, in a's compute type.
Tensor compare_with_scalar(BinaryOp op, const char* name, const Tensor& a, double b) {
  return run_binary(op, name, a, autograd::scalar_operand(b, a), kBool);
}

// Unary ops with a fused backward kernel: dx = f'(x, y) * g. Only what the
// op's derivative reads is saved (kernels::unary_backward_reads): the output
// for relu/sigmoid/tanh/exp/sqrt, the input for gelu/silu/log/..., nothing for neg.
// `keep_dtype`: the result has x's dtype even for integers (neg, abs, relu...);
// otherwise integers compute in f32. The input first goes through the op's
// autocast row (`policy`).
Tensor unary_differentiable(UnaryOp op, amp::Op policy, const Tensor& x_in, UnaryArgs args = {},
                            bool keep_dtype = false) {
  const autograd::CastInputs in = autograd::autocast_inputs(policy, {x_in});
  const Tensor& x = in[0];
  const DType dtype = keep_dtype ? x.dtype() : autograd::floating_result_type(x.dtype());
  Tensor out = empty(x.sizes(), dtype, x.device());
  kernels::unary(op, x, out, args);
  if (!autograd::needs_grad({x})) return out;
  const kernels::UnaryBackwardReads reads = kernels::unary_backward_reads(op);
  // saves: input and/or output, as unary_backward_reads(op) says (nothing for neg, sign)
  return record(
      in, out,
      [op, args, sx = save(reads.input ? x : Tensor()), sy = save(reads.output ? out : Tensor()), x_shape = x.sizes(),
       x_dtype = x.dtype()](const Tensor& g) -> std::vector<Tensor> {
        // An operand the derivative does not read is stood in for by g (never read).
        const Tensor x_ = sx.get(), y_ = sy.get();
        Tensor gx = empty(x_shape, x_dtype, g.device());
        kernels::unary_backward(op, g, x_.defined() ? x_ : g, y_.defined() ? y_ : g, gx, args);
        return {gx};
      },
      reads.input || reads.output);
}

}  // namespace

// ---------------------------------------------------------------- binary arithmetic

Tensor add(const Tensor& a, const Tensor& b) {
  // saves: nothing (the gradient passes to both sides, summed over broadcast dims)
  return binary_differentiable(
      BinaryOp::Add, amp::Op::Add, a, b, [](bool, bool) { return BinarySaves{}; },
      [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
        return std::pair{g, g};
      });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  // saves: nothing
  return binary_differentiable(
      BinaryOp::Sub, amp::Op::Sub, a, b, [](bool, bool) { return BinarySaves{}; },
      [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool need_b) {
        return std::pair{g, need_b ? neg(g) : Tensor()};
      });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  // saves: b when a needs a gradient, a when b does
  return binary_differentiable(
      BinaryOp::Mul, amp::Op::Mul, a, b,
      [](bool need_a, bool need_b) {
        return BinarySaves{need_b, need_a, false};
      },
      [](const Tensor& g, const Tensor& a_, const Tensor& b_, const Tensor&, bool need_a, bool need_b) {
        return std::pair{need_a ? mul(g, b_) : Tensor(), need_b ? mul(g, a_) : Tensor()};
      });
}

Tensor div(const Tensor& a, const Tensor& b) {
  // saves: b, and the output when b needs a gradient (d(a/b)/db = -(a/b)/b)
  return binary_differentiable(
      BinaryOp::Div, amp::Op::Div, a, b,
      [](bool, bool need_b) {
        return BinarySaves{false, true, need_b};
      },
      [](const Tensor& g, const Tensor&, const Tensor& b_, const Tensor& out, bool, bool need_b) {
        const Tensor ga = div(g, b_);
        return std::pair{ga, need_b ? neg(mul(ga, out)) : Tensor()};
      });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  // saves: a, b, output
  return binary_differentiable(
      BinaryOp::Pow, amp::Op::Pow, a, b,
      [](bool, bool) {
        return BinarySaves{true, true, true};
      },
      [](const Tensor& g, const Tensor& a_, const Tensor& b_, const Tensor& out, bool, bool) {
        // d(a^b)/da = b a^(b-1), defined as 0 where b == 0 (0 * 0^-1 would be NaN).
        const Tensor ga = masked_fill(mul(mul(g, b_), pow(a_, sub(b_, 1.0))), eq(b_, 0.0), 0.0);
        // d(a^b)/db = a^b log a, defined as 0 where a == 0 and b >= 0 (as PyTorch).
        const Tensor gb = masked_fill(mul(mul(g, out), log(a_)), logical_and(eq(a_, 0.0), ge(b_, 0.0)), 0.0);
        return std::pair{ga, gb};
      });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  // saves: a, b (which side won, and the ties)
  return binary_differentiable(
      BinaryOp::Maximum, amp::Op::Maximum, a, b,
      [](bool, bool) {
        return BinarySaves{true, true, false};
      },
      [](const Tensor& g, const Tensor& a_, const Tensor& b_, const Tensor&, bool, bool) {
        // PyTorch's rule: ties split the gradient evenly, and only the side
        // that lost gets zero, so where either is NaN both sides get g.
        const Tensor share = where(eq(a_, b_), mul(g, 0.5), g);
        return std::pair{masked_fill(share, lt(a_, b_), 0.0), masked_fill(share, gt(a_, b_), 0.0)};
      });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  // saves: a, b
  return binary_differentiable(
      BinaryOp::Minimum, amp::Op::Minimum, a, b,
      [](bool, bool) {
        return BinarySaves{true, true, false};
      },
      [](const Tensor& g, const Tensor& a_, const Tensor& b_, const Tensor&, bool, bool) {
        const Tensor share = where(eq(a_, b_), mul(g, 0.5), g);
        return std::pair{masked_fill(share, gt(a_, b_), 0.0), masked_fill(share, lt(a_, b_), 0.0)};
      });
}

// ---------------------------------------------------------------- scalar forms

namespace {

// Applies a binary op with a scalar right operand, keeping a's dtype (a float
// scalar turns an integer tensor into f32, as in PyTorch).
Tensor binary_with_scalar(BinaryOp op, amp::Op policy, const Tensor& a_in, double b, bool scalar_first = false) {
  const autograd::CastInputs in = autograd::autocast_inputs(policy, {a_in});
  const Tensor& a = in[0];
  const char* name = in.name();
  const bool integral_scalar = std::nearbyint(b) == b;
  DType dtype = is_floating(a.dtype()) || integral_scalar ? a.dtype() : kF32;
  if (op == BinaryOp::Div && !is_floating(dtype)) dtype = kF32;
  const Tensor s = autograd::scalar_operand(b, a);
  Tensor out = scalar_first ? run_binary(op, name, s, a, dtype) : run_binary(op, name, a, s, dtype);
  if (!autograd::needs_grad({a})) return out;
  // saves: nothing (the scalar only)
  return record(in, out, [op, b, scalar_first](const Tensor& g) -> std::vector<Tensor> {
    switch (op) {
      case BinaryOp::Add: return {g};
      case BinaryOp::Sub: return {scalar_first ? neg(g) : g};
      case BinaryOp::Mul: return {mul(g, b)};
      case BinaryOp::Div: return {div(g, b)};
      default: fail("{}: no scalar backward rule", static_cast<int>(op));
    }
  });
}

}  // namespace

Tensor add(const Tensor& a, double b) { return binary_with_scalar(BinaryOp::Add, amp::Op::Add, a, b); }
Tensor sub(const Tensor& a, double b) { return binary_with_scalar(BinaryOp::Sub, amp::Op::Sub, a, b); }
Tensor mul(const Tensor& a, double b) { return binary_with_scalar(BinaryOp::Mul, amp::Op::Mul, a, b); }
Tensor div(const Tensor& a, double b) { return binary_with_scalar(BinaryOp::Div, amp::Op::Div, a, b); }
Tensor rsub(const Tensor& a, double b) { return binary_with_scalar(BinaryOp::Sub, amp::Op::Rsub, a, b, true); }
Tensor pow(const Tensor& a, double exponent) {
  return unary_differentiable(UnaryOp::PowScalar, amp::Op::Pow, a, {exponent, 0});
}

// ---------------------------------------------------------------- unary math and activations

Tensor neg(const Tensor& x) { return unary_differentiable(UnaryOp::Neg, amp::Op::Neg, x, {}, /*keep_dtype=*/true); }
Tensor exp(const Tensor& x) { return unary_differentiable(UnaryOp::Exp, amp::Op::Exp, x); }
Tensor log(const Tensor& x) { return unary_differentiable(UnaryOp::Log, amp::Op::Log, x); }
Tensor sqrt(const Tensor& x) { return unary_differentiable(UnaryOp::Sqrt, amp::Op::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_differentiable(UnaryOp::Rsqrt, amp::Op::Rsqrt, x); }
Tensor abs(const Tensor& x) { return unary_differentiable(UnaryOp::Abs, amp::Op::Abs, x, {}, /*keep_dtype=*/true); }
Tensor sign(const Tensor& x) { return unary_differentiable(UnaryOp::Sign, amp::Op::Sign, x, {}, /*keep_dtype=*/true); }
Tensor reciprocal(const Tensor& x) { return unary_differentiable(UnaryOp::Reciprocal, amp::Op::Reciprocal, x); }
Tensor square(const Tensor& x) {
  return unary_differentiable(UnaryOp::Square, amp::Op::Square, x, {}, /*keep_dtype=*/true);
}
Tensor relu(const Tensor& x) {
  // Unsigned integers are never negative: ReLU leaves them as they are (the
  // u8 activations between INT8 layers, requantized with their ReLU applied
  // already: autograd/int8.h's Requantization).
  if (x.dtype() == kU8) return x.clone();
  return unary_differentiable(UnaryOp::Relu, amp::Op::Relu, x, {}, /*keep_dtype=*/true);
}
Tensor silu(const Tensor& x) { return unary_differentiable(UnaryOp::Silu, amp::Op::Silu, x); }
Tensor tanh(const Tensor& x) { return unary_differentiable(UnaryOp::Tanh, amp::Op::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_differentiable(UnaryOp::Sigmoid, amp::Op::Sigmoid, x); }
Tensor sin(const Tensor& x) { return unary_differentiable(UnaryOp::Sin, amp::Op::Sin, x); }
Tensor cos(const Tensor& x) { return unary_differentiable(UnaryOp::Cos, amp::Op::Cos, x); }

Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  return approximation == GeluApproximation::Tanh ? unary_differentiable(UnaryOp::GeluTanh, amp::Op::Gelu, x)
                                                  : unary_differentiable(UnaryOp::GeluErf, amp::Op::Gelu, x);
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  MT_CHECK(min || max, "clamp: at least one of min and max must be given");
  const double lo = min.value_or(-std::numeric_limits<double>::infinity());
  const double hi = max.value_or(std::numeric_limits<double>::infinity());
  MT_CHECK(!(lo > hi), "clamp: min {} is greater than max {}", lo, hi);
  return unary_differentiable(UnaryOp::Clamp, amp::Op::Clamp, x, {lo, hi}, /*keep_dtype=*/true);
}

// ---------------------------------------------------------------- comparisons and selection

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, "ge", a, b); }
Tensor eq(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, double b) { return compare_with_scalar(BinaryOp::Ge, "ge", a, b); }

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  MT_CHECK(cond.dtype() == kBool, "where: condition must be a bool tensor, got {}", cond.dtype());
  const autograd::CastInputs in = autograd::autocast_inputs(amp::Op::Where, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  autograd::check_same_device("where", cond, a);
  autograd::check_same_device("where", a, b);
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = empty(shape, autograd::binary_result_type(a, b), a.device());
  kernels::where(broadcast_view(cond, shape), broadcast_view(a, shape), broadcast_view(b, shape), out);
  if (!autograd::needs_grad({a, b})) return out;
  // Only the operands that need a gradient get one: a mask's fill value (the
  // -inf of causal attention) would otherwise cost a full-size where and sum.
  const bool need_a = autograd::needs_grad({a}), need_b = autograd::needs_grad({b});
  // saves: condition
  return record(in, out,
                [sc = save(cond), a_shape = a.sizes(), b_shape = b.sizes(), need_a,
                 need_b](const Tensor& g) -> std::vector<Tensor> {
                  const Tensor zero = zeros({}, g.dtype(), g.device());
                  const Tensor c = sc.get();
                  return {need_a ? sum_to_size(where(c, g, zero), a_shape) : Tensor(),
                          need_b ? sum_to_size(where(c, zero, g), b_shape) : Tensor()};
                });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  MT_CHECK(mask.dtype() == kBool, "masked_fill: mask must be a bool tensor, got {}", mask.dtype());
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  MT_CHECK(shape == x.sizes(), "masked_fill: mask of shape {} would broadcast the input {} to {}", mask.shape_string(),
           x.shape_string(), shape_str(shape));
  return where(mask, full({}, value, x.dtype(), x.device()), x);
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dtype() == kBool && b.dtype() == kBool, "logical_and: expected bool tensors, got {} and {}", a.dtype(),
           b.dtype());
  return run_binary(BinaryOp::Mul, "logical_and", a, b, kBool);
}

}  // namespace mt
