#include "autograd/fp8.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/fp8/fp8.h"
#include "kernels/gemm/fp8.h"
#include "kernels/gemm/matmul.h"

namespace mt::fp8 {

namespace {

constexpr int64_t kGroupEdge = 128;  // the tiles' and blocks' side

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// rows x cols of `sizes` (cols = the last dim; a 0-dim tensor is 1 x 1).
std::pair<int64_t, int64_t> rows_cols(const Shape& sizes) {
  if (sizes.empty()) return {1, 1};
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) rows *= sizes[d];
  return {rows, sizes.back()};
}

kernels::Fp8Groups groups_for(const Shape& sizes, ScaleLayout layout) {
  const auto [rows, cols] = rows_cols(sizes);
  kernels::Fp8Groups g;
  g.rows = rows;
  g.cols = cols;
  switch (layout) {
    case ScaleLayout::PerTensor:
      g.group_rows = std::max<int64_t>(rows, 1), g.group_cols = std::max<int64_t>(cols, 1);
      break;
    case ScaleLayout::PerRow: g.group_rows = 1, g.group_cols = std::max<int64_t>(cols, 1); break;
    case ScaleLayout::Tiles1x128: g.group_rows = 1, g.group_cols = kGroupEdge; break;
    case ScaleLayout::Blocks128x128: g.group_rows = kGroupEdge, g.group_cols = kGroupEdge; break;
  }
  return g;
}

kernels::Fp8ScaleRule scale_rule(Format format, int margin) {
  MT_CHECK(margin >= 0 && margin <= 64, "fp8: margin must be a whole number from 0 to 64, got {}", margin);
  return {max_finite(format), std::ldexp(1.0f, -margin)};
}

Tensor contiguous_input(const Tensor& x, const char* op) {
  MT_CHECK(x.defined() && is_compute_float(x.dtype()), "{}: expected an f64, f32, f16 or bf16 tensor, got {}", op,
           x.defined() ? dtype_name(x.dtype()) : std::string_view("an undefined tensor"));
  return x.is_contiguous() ? x.detach() : x.detach().contiguous();
}

Tensor f32_scalar_zero(Device device) { return zeros({}, kF32, device); }

}  // namespace

DType dtype_of(Format format) { return format == Format::E4M3 ? kF8E4M3 : kF8E5M2; }

Format format_of(DType dtype) {
  MT_CHECK(is_fp8(dtype), "fp8: expected an f8e4m3 or f8e5m2 tensor, got {}", dtype);
  return dtype == kF8E4M3 ? Format::E4M3 : Format::E5M2;
}

float max_finite(Format format) { return format == Format::E4M3 ? kE4M3Format.max_finite : kE5M2Format.max_finite; }

std::string_view layout_name(ScaleLayout layout) {
  switch (layout) {
    case ScaleLayout::PerTensor: return "tensor";
    case ScaleLayout::PerRow: return "row";
    case ScaleLayout::Tiles1x128: return "1x128";
    case ScaleLayout::Blocks128x128: return "128x128";
  }
  return "?";
}

Shape scale_shape(const Shape& sizes, ScaleLayout layout) {
  const auto [rows, cols] = rows_cols(sizes);
  switch (layout) {
    case ScaleLayout::PerTensor: return {};
    case ScaleLayout::PerRow: return {rows};
    case ScaleLayout::Tiles1x128: return {rows, ceil_div(cols, kGroupEdge)};
    case ScaleLayout::Blocks128x128: return {ceil_div(rows, kGroupEdge), ceil_div(cols, kGroupEdge)};
  }
  return {};
}

Fp8Tensor Fp8Tensor::t() const {
  MT_CHECK(data.dim() == 2, "Fp8Tensor::t: expected a 2-D tensor, got {}", data.shape_string());
  MT_CHECK(layout == ScaleLayout::PerTensor || layout == ScaleLayout::Blocks128x128,
           "Fp8Tensor::t: {} scales do not transpose into a layout the GEMM takes (rows become columns); "
           "quantize the transposed tensor instead",
           layout_name(layout));
  NoGradGuard no_grad;
  Fp8Tensor out;
  out.data = data_t.defined() ? data_t : data.t().contiguous();
  out.scale_inv = layout == ScaleLayout::PerTensor ? scale_inv : scale_inv.t().contiguous();
  out.layout = layout;
  return out;
}

namespace {

// The transposed output a per-tensor quantize writes beside `data`.
Tensor transposed_output(const Tensor& input, Format format, bool with_transpose) {
  if (!with_transpose) return Tensor();
  MT_CHECK(input.dim() == 2, "fp8::quantize: with_transpose needs a 2-D tensor, got {}", input.shape_string());
  return empty({input.size(1), input.size(0)}, dtype_of(format), input.device());
}

}  // namespace

Fp8Tensor quantize(const Tensor& x, Format format, ScaleLayout layout, int margin, bool with_transpose) {
  NoGradGuard no_grad;
  const Tensor input = contiguous_input(x, "fp8::quantize");
  const kernels::Fp8ScaleRule rule = scale_rule(format, margin);
  Fp8Tensor out;
  out.data = empty(input.sizes(), dtype_of(format), input.device());
  out.layout = layout;
  out.scale_inv = empty(scale_shape(input.sizes(), layout), kF32, input.device());
  if (with_transpose && layout == ScaleLayout::PerTensor) {
    // Two passes as current scaling needs (the amax, then the cast), the
    // second also writing the transpose.
    const Tensor max_abs = amax(input), scale = empty({}, kF32, input.device());
    kernels::fp8_scale_from_amax(max_abs, rule, scale, out.scale_inv);
    out.data_t = transposed_output(input, format, true);
    kernels::fp8_quantize_with_scale(input, scale, out.data, Tensor(), out.data_t);
    return out;
  }
  kernels::fp8_quantize_grouped(input, groups_for(input.sizes(), layout), rule, out.data, out.scale_inv);
  return out;
}

Fp8Tensor quantize_with_scale(const Tensor& x, Format format, const Tensor& scale, const Tensor& amax_out,
                              bool with_transpose) {
  NoGradGuard no_grad;
  const Tensor input = contiguous_input(x, "fp8::quantize_with_scale");
  Fp8Tensor out;
  out.data = empty(input.sizes(), dtype_of(format), input.device());
  out.layout = ScaleLayout::PerTensor;
  out.data_t = transposed_output(input, format, with_transpose);
  kernels::fp8_quantize_with_scale(input, scale, out.data, amax_out, out.data_t);
  // scale_inv = 1 / scale on the device: reciprocal is an elementwise kernel.
  out.scale_inv = empty({}, kF32, input.device());
  kernels::unary(kernels::UnaryOp::Reciprocal, scale.view({}), out.scale_inv);
  return out;
}

Tensor amax(const Tensor& x) {
  NoGradGuard no_grad;
  const Tensor input = contiguous_input(x, "fp8::amax");
  Tensor out = f32_scalar_zero(input.device());
  kernels::fp8_amax(input, out);
  return out;
}

void count_saturated_and_flushed(const Tensor& x, const Fp8Tensor& q, const Tensor& counts) {
  MT_CHECK(x.defined() && x.sizes() == q.sizes(), "fp8::count_saturated_and_flushed: x {} is not the shape of q {}",
           x.defined() ? x.shape_string() : "undefined", q.data.shape_string());
  NoGradGuard no_grad;
  kernels::fp8_count_saturated_and_flushed(q.data, x.contiguous(), q.scale_inv.contiguous(),
                                           groups_for(q.sizes(), q.layout), counts);
}

Tensor dequantize(const Fp8Tensor& q, DType dtype) {
  MT_CHECK(q.data.defined() && is_fp8(q.data.dtype()) && q.data.is_contiguous(),
           "fp8::dequantize: expected contiguous FP8 data");
  MT_CHECK(q.scale_inv.defined() && q.scale_inv.sizes() == scale_shape(q.sizes(), q.layout),
           "fp8::dequantize: {} scales of {} data must have shape {}, got {}", layout_name(q.layout),
           q.data.shape_string(), shape_str(scale_shape(q.sizes(), q.layout)),
           q.scale_inv.defined() ? q.scale_inv.shape_string() : std::string("none"));
  MT_CHECK(is_compute_float(dtype), "fp8::dequantize: the output dtype must be f64, f32, f16 or bf16, got {}", dtype);
  NoGradGuard no_grad;
  Tensor out = empty(q.sizes(), dtype, q.device());
  kernels::fp8_dequantize(q.data, q.scale_inv.contiguous(), groups_for(q.sizes(), q.layout), out);
  return out;
}

namespace {

bool is_k_grouped(ScaleLayout layout) {
  return layout == ScaleLayout::Tiles1x128 || layout == ScaleLayout::Blocks128x128;
}

// The operand as [k_groups, rows, k_group] in a dtype the GEMM multiplies
// exactly (bf16 on the CPU, f32 elsewhere), K zero-padded to whole groups.
Tensor widened_k_groups(const Tensor& data, int64_t k_groups, int64_t k_group) {
  const DType wide = data.device().is_cpu() ? kBF16 : kF32;
  const int64_t rows = data.size(0), k = data.size(1);
  Tensor padded = data.to(wide);  // exact: every FP8 value is a bf16 value
  if (k_groups * k_group != k) {
    Tensor z = zeros({rows, k_groups * k_group}, wide, data.device());
    kernels::copy(padded, z.narrow(1, 0, k));
    padded = z;
  }
  return padded.view({rows, k_groups, k_group}).permute({1, 0, 2});
}

}  // namespace

Tensor gemm_nt(const Fp8Tensor& a, const Fp8Tensor& b, DType out_dtype, const Tensor& bias) {
  MT_CHECK(a.data.dim() == 2 && b.data.dim() == 2 && a.data.size(1) == b.data.size(1),
           "fp8::gemm_nt: a [M, K] and b [N, K] must share K, got {} and {}", a.data.shape_string(),
           b.data.shape_string());
  MT_CHECK(a.device() == b.device(), "fp8::gemm_nt: a is on {} but b on {}", a.device(), b.device());
  MT_CHECK(is_k_grouped(a.layout) == is_k_grouped(b.layout),
           "fp8::gemm_nt: {} scales of a and {} scales of b do not meet: 1x128 tiles and 128x128 blocks split K "
           "into groups, so both operands need one of them",
           layout_name(a.layout), layout_name(b.layout));
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == b.data.size(0)),
           "fp8::gemm_nt: bias must be [{}], got {}", b.data.size(0), bias.defined() ? bias.shape_string() : "");
  MT_CHECK(is_compute_float(out_dtype), "fp8::gemm_nt: out_dtype must be f64, f32, f16 or bf16, got {}", out_dtype);
  NoGradGuard no_grad;
  const int64_t m = a.data.size(0), n = b.data.size(0), k = a.data.size(1);
  // The FP8 GEMM (v10 / cuBLASLt's FP8) where it takes the operands; else widened.
  const bool per_tensor = a.layout == ScaleLayout::PerTensor && b.layout == ScaleLayout::PerTensor;
  const bool tiles_by_blocks = a.layout == ScaleLayout::Tiles1x128 && b.layout == ScaleLayout::Blocks128x128;
  if (const auto backend = kernels::fp8_gemm_backend(a.data, b.data, per_tensor, tiles_by_blocks, out_dtype)) {
    Tensor out = empty({m, n}, out_dtype, a.device());
    const Tensor typed_bias = bias.defined() ? bias.detach().to(out_dtype).contiguous() : Tensor();
    kernels::fp8_gemm(a.data, a.scale_inv.contiguous(), b.data, b.scale_inv.contiguous(), tiles_by_blocks, typed_bias,
                      *backend, out);
    return out;
  }
  const bool grouped = is_k_grouped(a.layout);
  const int64_t k_group = grouped ? kGroupEdge : std::max<int64_t>(k, 1);
  const int64_t k_groups = grouped ? ceil_div(k, kGroupEdge) : 1;
  Tensor product = empty({k_groups, m, n}, kF32, a.device());
  if (k == 0) {
    product = zeros({k_groups, m, n}, kF32, a.device());
  } else {
    const Tensor lhs = widened_k_groups(a.data, k_groups, k_group);                  // [G, M, kg]
    const Tensor rhs = widened_k_groups(b.data, k_groups, k_group).transpose(1, 2);  // [G, kg, N]
    kernels::bmm(lhs, rhs, product);
  }
  Tensor out = empty({m, n}, out_dtype, a.device());
  const Tensor bias_f32 = bias.defined() ? bias.detach().to(kF32).contiguous() : Tensor();
  kernels::fp8_gemm_combine(product, k_group, a.scale_inv.contiguous(), groups_for(a.sizes(), a.layout),
                            b.scale_inv.contiguous(), groups_for(b.sizes(), b.layout), bias_f32, out);
  return out;
}

// ---- FP8 linear layers ------------------------------------------------------

namespace {

thread_local Region* current_region = nullptr;

// An operand as the weight gradient reads it, along M: the one quantized
// along K transposed when its scales transpose, else a fresh quantization of
// the transposed high-precision tensor.
Fp8Tensor along_m(LinearScaling& scaling, Fp8Role role, const Fp8Tensor& along_k, const Tensor& high_precision) {
  return scaling.transposes(role) ? along_k.t() : scaling.quantize(role, high_precision.t().contiguous());
}

// A saved operand's bytes (data and scales) in the ledger's FP8 category;
// only while Other, so a scale shared with delayed scaling's state stays there.
void file_saved(const Fp8Tensor& q, MemoryCategory category) {
  tag_memory_if_other(q.data, category);
  tag_memory_if_other(q.scale_inv, category);
}

}  // namespace

Region* active_region() { return current_region; }

Region* set_active_region(Region* region) {
  Region* previous = current_region;
  current_region = region;
  return previous;
}

namespace {

// --fp8-shadow: ||y - y_twin|| / ||y_twin|| in f32 on the device (no host
// read), y_twin the Linear's high-precision twin on the same inputs: the
// autocast dtype's GEMM, outside any FP8 region.
Tensor shadow_error(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const NoRegionGuard no_fp8;
  const Tensor twin = mt::linear(x.detach(), weight.detach(), bias.defined() ? bias.detach() : Tensor()).to(kF32);
  const Tensor diff = sub(y.to(kF32), twin);
  return div(sqrt(sum(mul(diff, diff))), sqrt(sum(mul(twin, twin))));
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, LinearScaling& scaling) {
  // InputDType: nothing is cast; x arrives as the previous op made it, W as its master.
  const auto in = autograd::autocast_inputs(amp::Op::Fp8Linear, {x_in, weight_in, bias_in});
  const Tensor& x = in[0];
  const Tensor& weight = in[1];
  const Tensor& bias = in[2];
  MT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "fp8_linear: input {} does not end in in_features of weight {}", x.shape_string(), weight.shape_string());
  MT_CHECK(x.device() == weight.device() && (!bias.defined() || bias.device() == x.device()),
           "fp8_linear: input, weight and bias must be on one device");
  const int64_t k = weight.size(1), n = weight.size(0);
  const int64_t m = shape_numel(Shape(x.sizes().begin(), x.sizes().end() - 1));
  Shape out_shape = x.sizes();
  out_shape.back() = n;
  const DType out_dtype = amp::is_autocast_enabled(x.device()) ? amp::autocast_dtype(x.device()) : x.dtype();
  const bool need_x = autograd::needs_grad({x}), need_w = autograd::needs_grad({weight});
  const bool need_b = autograd::needs_grad({bias});
  const Tensor x2 = x.detach().reshape({m, k});
  Tensor out;
  Fp8Tensor saved_x, saved_w;
  {
    NoGradGuard no_grad;  // the one node recorded below is this op's
    const Fp8Tensor qx = scaling.quantize(Fp8Role::Input, x2, need_w && scaling.transposes(Fp8Role::Input));
    const Fp8Tensor qw =
        scaling.quantize(Fp8Role::Weight, weight.detach(), need_x && scaling.transposes(Fp8Role::Weight));
    out = gemm_nt(qx, qw, out_dtype, bias.defined() ? bias.detach() : Tensor()).reshape(out_shape);
    if (scaling.wants_shadow()) scaling.note_shadow_error(shadow_error(out, x, weight, bias));
    if (need_w) saved_x = along_m(scaling, Fp8Role::Input, qx, x2);
    if (need_x) saved_w = qw.t();  // [K, N], as the input gradient reads it (written by the cast where it can be)
  }
  if (!need_x && !need_w && !need_b) return out;
  file_saved(saved_x, MemoryCategory::Fp8Activations);
  file_saved(saved_w, MemoryCategory::Fp8WeightCasts);
  scaling.note_saved_for_backward(m, need_w, need_x);
  // saves: input (FP8 + scales, along M: what the weight gradient reads), weight (FP8 + scales, transposed:
  // what the input gradient reads)
  return autograd::record(
      in, out,
      [sx = std::move(saved_x), sw = std::move(saved_w), scaling = &scaling, x_shape = x.sizes(), x_dtype = x.dtype(),
       w_dtype = weight.dtype(), b_dtype = bias.defined() ? bias.dtype() : kF32, m, n, need_x, need_w,
       need_b](const Tensor& g) -> std::vector<Tensor> {
        const Tensor g2 = g.detach().reshape({m, n}).contiguous();
        const Fp8Tensor qg =
            scaling->quantize(Fp8Role::GradOutput, g2, need_w && scaling->transposes(Fp8Role::GradOutput));
        Tensor gx, gw, gb;
        if (need_x) gx = gemm_nt(qg, sw, x_dtype).reshape(x_shape);
        if (need_w) gw = gemm_nt(along_m(*scaling, Fp8Role::GradOutput, qg, g2), sx, w_dtype);
        if (need_b) gb = sum(g2.to(kF32), {0}).to(b_dtype);
        return {gx, gw, gb};
      });
}

void add_to_state(std::map<std::string, Tensor>& state, const std::string& name, const Fp8Tensor& q) {
  state[name] = q.data;
  state[name + ".scale_inv"] = q.scale_inv;
}

Fp8Tensor from_state(const std::map<std::string, Tensor>& state, const std::string& name) {
  const auto data = state.find(name);
  const auto scales = state.find(name + ".scale_inv");
  MT_CHECK(data != state.end() && scales != state.end(), "fp8: the state has no '{}' with its '{}.scale_inv'", name,
           name);
  MT_CHECK(is_fp8(data->second.dtype()), "fp8: '{}' is stored as {}, expected f8e4m3 or f8e5m2", name,
           data->second.dtype());
  const Tensor& s = scales->second;
  MT_CHECK(s.dtype() == kF32, "fp8: '{}.scale_inv' is stored as {}, expected f32", name, s.dtype());
  Fp8Tensor q;
  q.data = data->second.contiguous();
  bool matched = false;
  for (ScaleLayout layout :
       {ScaleLayout::PerTensor, ScaleLayout::PerRow, ScaleLayout::Tiles1x128, ScaleLayout::Blocks128x128}) {
    if (s.sizes() == scale_shape(q.sizes(), layout)) {
      q.layout = layout;
      matched = true;
      break;
    }
  }
  MT_CHECK(matched, "fp8: '{}.scale_inv' has shape {}, which is no scale layout of {} data", name, s.shape_string(),
           q.data.shape_string());
  // Hostile files: a zero, negative, inf or NaN scale would turn the data into garbage silently.
  for (double v : s.to_vector()) {
    MT_CHECK(std::isfinite(v) && v > 0, "fp8: '{}.scale_inv' holds {}, expected positive finite scales", name, v);
  }
  q.scale_inv = s.contiguous();
  return q;
}

}  // namespace mt::fp8
