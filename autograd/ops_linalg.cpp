// matmul / bmm / linear. bmm has its own backward rule and matmul is a
// composition of views and bmm; linear is one GEMM with a bias (and ReLU or GELU)
// epilogue and its own rule.
#include <optional>

#include "autograd/autocast.h"
#include "autograd/dtype_report.h"
#include "autograd/fp8.h"
#include "autograd/op_helpers.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/matmul.h"

namespace mt {

using autograd::record;
using autograd::save;

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const auto in = autograd::autocast_inputs(amp::Op::Bmm, {a_in, b_in});
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  autograd::check_same_device("bmm", a, b);
  MT_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors [batch, M, K] and [batch, K, N], got {} and {}",
           a.shape_string(), b.shape_string());
  MT_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
           "bmm: shapes {} and {} do not line up (batch and inner dims must match)", a.shape_string(),
           b.shape_string());
  MT_CHECK(a.dtype() == b.dtype(), "bmm: expected both operands to have the same dtype, got {} and {}", a.dtype(),
           b.dtype());
  autograd::check_floating("bmm", a);
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  kernels::bmm(a, b, out);
  if (!autograd::needs_grad({a, b})) return out;
  // saves: a, b (compute dtype)
  return record(in, out,
                [sa = save(a), sb = save(b), need_a = autograd::needs_grad({a}),
                 need_b = autograd::needs_grad({b})](const Tensor& g) -> std::vector<Tensor> {
                  // dA = dC @ B^T, dB = A^T @ dC (transposes are free views for the kernel)
                  Tensor ga = need_a ? bmm(g, sb.get().transpose(1, 2)) : Tensor();
                  Tensor gb = need_b ? bmm(sa.get().transpose(1, 2), g) : Tensor();
                  return {ga, gb};
                });
}

Tensor outer(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expects two 1-D tensors, got {} and {}", a.shape_string(),
           b.shape_string());
  // Each product is one multiplication, so the broadcast mul is exact where
  // a GEMM of K = 1 would add nothing; it also keeps mul's Promote rule.
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // saves: nothing of its own (records no node: views around one bmm, which saves a, b)
  const auto in = autograd::autocast_inputs(amp::Op::MatMul, {a_in, b_in});
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got {} and {}", a.shape_string(),
           b.shape_string());
  // Vectors become matrices and the added dim is removed from the result.
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);

  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  MT_CHECK(b.size(-2) == k, "matmul: shapes {} and {} cannot be multiplied ({} columns vs {} rows)", a.shape_string(),
           b.shape_string(), k, b.size(-2));
  // unsqueeze keeps strides, so a transposed operand reaches the kernel as a free view.
  if (a.dim() == 2 && b.dim() == 2) return bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
  const Shape a_batch(a.sizes().begin(), a.sizes().end() - 2);
  const Shape b_batch(b.sizes().begin(), b.sizes().end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
  const int64_t batch_numel = shape_numel(batch);

  Shape a_full = batch, b_full = batch, out_shape = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  // A 2-D right operand shared by every batch element: fold the batch into M (one big GEMM).
  if (b.dim() == 2 && a.dim() > 2) {
    const Tensor a2 = a.reshape({1, batch_numel * m, k});
    return bmm(a2, b.unsqueeze(0)).reshape(out_shape);
  }
  const Tensor a3 = (a.sizes() == a_full ? a : a.expand(a_full)).reshape({batch_numel, m, k});
  const Tensor b3 = (b.sizes() == b_full ? b : b.expand(b_full)).reshape({batch_numel, k, n});
  return bmm(a3, b3).reshape(out_shape);
}

namespace {


// The elementwise op whose backward carries the gradient through the fused
// activation (none for a plain linear).
std::optional<kernels::UnaryOp> activation_backward(LinearActivation activation) {
  switch (activation) {
    case LinearActivation::None: return std::nullopt;
    case LinearActivation::Relu: return kernels::UnaryOp::Relu;
    case LinearActivation::Gelu: return kernels::UnaryOp::GeluErf;
    case LinearActivation::GeluTanh: return kernels::UnaryOp::GeluTanh;
  }
  return std::nullopt;
}

}  // namespace

namespace {

// An activation the FP8 path runs after its GEMMs (it has no fused epilogue).
Tensor activate(const Tensor& y, LinearActivation activation) {
  switch (activation) {
    case LinearActivation::None: return y;
    case LinearActivation::Relu: return relu(y);
    case LinearActivation::Gelu: return gelu(y);
    case LinearActivation::GeluTanh: return gelu(y, GeluApproximation::Tanh);
  }
  return y;
}

// y = act(x W^T + b) in the autocast dtype: one GEMM with the bias and the
// activation in its epilogue, one tape node.
Tensor high_precision_linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                             LinearActivation activation) {
  const auto in = autograd::autocast_inputs(amp::Op::Linear, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  MT_CHECK(weight.dim() == 2, "linear: weight must be [out_features, in_features], got {}", weight.shape_string());
  MT_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
           "linear: input {} does not end in in_features = {} (weight {})", x.shape_string(), weight.size(1),
           weight.shape_string());
  autograd::check_same_device("linear", x, weight);
  autograd::check_floating("linear", x);
  MT_CHECK(x.dtype() == weight.dtype(), "linear: input is {} but weight is {} (use autocast or cast one)", x.dtype(),
           weight.dtype());
  if (bias.defined()) {
    MT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias {} does not match out_features = {}",
             bias.shape_string(), weight.size(0));
    autograd::check_same_device("linear", x, bias);
    MT_CHECK(bias.dtype() == x.dtype(), "linear: bias is {} but input and weight are {}", bias.dtype(), x.dtype());
  }
  const int64_t k = weight.size(1), n = weight.size(0);
  const int64_t m = shape_numel(Shape(x.sizes().begin(), x.sizes().end() - 1));
  Shape out_shape = x.sizes();
  out_shape.back() = n;
  const kernels::GemmActivation fused = autograd::gemm_activation(activation);
  const bool gelu = activation == LinearActivation::Gelu || activation == LinearActivation::GeluTanh;
  const bool grad = autograd::needs_grad({x, weight, bias});
  // The kernel sees plain views (no tape); the one node recorded is linear's own.
  const Tensor x2 = x.detach().reshape({m, k});
  Tensor out2 = empty({m, n}, x.dtype(), x.device());
  // GELU's backward reads the pre-activation, stored by the same epilogue.
  const Tensor pre2 = gelu && grad ? empty({m, n}, x.dtype(), x.device()) : Tensor();
  kernels::bmm(x2.unsqueeze(0), weight.detach().t().unsqueeze(0), out2.unsqueeze(0),
               {bias.defined() ? bias.detach() : Tensor(), fused, pre2.defined() ? pre2.unsqueeze(0) : Tensor()});
  const Tensor out = out2.reshape(out_shape);
  if (!grad) return out;
  // saves: input (as [M, K]), weight (compute dtype); + output for a fused ReLU,
  // pre-activation for a fused GELU
  const bool relu = activation == LinearActivation::Relu;
  return record(in, out,
                [sx = save(x2), sw = save(weight), sy = save(relu ? out2 : Tensor()), sz = save(pre2),
                 through = activation_backward(activation), x_shape = x.sizes(), m, n, has_bias = bias.defined(),
                 need_x = autograd::needs_grad({x}), need_w = autograd::needs_grad({weight}),
                 need_b = autograd::needs_grad({bias})](const Tensor& g) -> std::vector<Tensor> {
                  Tensor g2 = g.reshape({m, n});
                  if (through) {  // through the fused activation: d/dz from y (ReLU) or z (GELU)
                    const Tensor y = sy.get(), z = sz.get();
                    Tensor dz = empty(g2.sizes(), g2.dtype(), g2.device());
                    kernels::unary_backward(*through, g2, z.defined() ? z : y, y.defined() ? y : z, dz);
                    g2 = dz;
                  }
                  const Tensor gx = need_x ? matmul(g2, sw.get()).reshape(x_shape) : Tensor();
                  const Tensor gw = need_w ? matmul(g2.t(), sx.get()) : Tensor();
                  const Tensor gb = has_bias && need_b ? sum(g2, {0}) : Tensor();
                  return {gx, gw, gb};
                });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearActivation activation) {
  // Inside an FP8 region (amp::Fp8Autocast) an eligible Linear runs its GEMMs in FP8.
  fp8::Region* region = fp8::active_region();
  if (region == nullptr) return high_precision_linear(x, weight, bias, activation);
  if (fp8::LinearScaling* scaling = region->scaling_for(weight)) {
    return activate(fp8::linear(x, weight, bias, *scaling), activation);
  }
  const Tensor y = high_precision_linear(x, weight, bias, activation);
  if (autograd::DtypeRecorder* recorder = autograd::active_dtype_recorder()) {
    recorder->note_not_fp8(y, region->high_precision_reason(weight));
  }
  return y;
}

Tensor router_logits(const Tensor& x_in, const Tensor& weight_in) {
  // saves: nothing of its own (linear's node keeps the input and weight, in f32)
  const auto in = autograd::autocast_inputs(amp::Op::RouterLogits, {x_in, weight_in});
  MT_CHECK(in[1].dim() == 2, "router_logits: weight must be [experts, in], got {}", in[1].shape_string());
  // Neither autocast nor an FP8 region reaches inside: the GEMM runs on the f32 inputs.
  const amp::Autocast inside(in[0].device(), amp::autocast_dtype(in[0].device()), /*enabled=*/false);
  return high_precision_linear(in[0], in[1], Tensor(), LinearActivation::None);
}

}  // namespace mt
