// CPU GEMM through oneDNN's matmul primitive: f32 and bf16 operands (f16
// ones widened to f32), f32 accumulation, one rounding into out's dtype.
//
// Under autocast the operands arrive in bf16 and stay bf16: oneDNN multiplies
// them with the CPU's BF16 dot product (vdpbf16ps with AVX512-BF16, AMX
// tiles where present, an emulation on older CPUs), where the Eigen path
// widened every operand to f32 first and multiplied in f32.
//
// The epilogue: bias is fused into the primitive (added in f32 before the
// one rounding, as the Eigen and GPU epilogues do). ReLU runs on the rounded
// output with the elementwise kernel: rounding commutes with it, and
// oneDNN's ReLU post-op turns NaN into 0 where mixtape and PyTorch keep NaN
// (the parity suite's linear/no_bias_nan case). GELU runs after the product
// with the elementwise ops' formulas (kernels/gemm/epilogue.h) on an f32
// result, so a fused Linear + GELU gives the same function on every back end.
//
// Primitives are made once per shape, layout, dtype, epilogue and thread
// count, and kept (oneDNN picks its blocking from the thread count at
// creation). A primitive oneDNN can only offer as its reference
// implementation is declined: Eigen is faster than that.
#include "kernels/gemm/onednn.h"

#include <omp.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/common/cpu_backend.h"
#include "kernels/common/onednn.h"
#include "kernels/common/strided.h"
#include "kernels/elementwise/cpu.h"
#include "kernels/gemm/epilogue.h"

namespace mt::kernels::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

// One batched matrix as oneDNN sees it: {batch, rows, cols} with the
// tensor's strides. A batch stride of 0 (an expanded operand) becomes a batch
// of 1 that oneDNN broadcasts. None when neither of the last two strides is 1.
std::optional<memory::desc> matrix_desc(const Tensor& t, memory::data_type dtype) {
  Dims dims = {t.size(0), t.size(1), t.size(2)};
  Dims strides = {t.stride(0), t.stride(1), t.stride(2)};
  const int64_t rows = dims[1], cols = dims[2];
  const bool row_major = strides[2] == 1 && strides[1] >= std::max<int64_t>(cols, 1);
  const bool col_major = strides[1] == 1 && strides[2] >= std::max<int64_t>(rows, 1);
  if (!row_major && !col_major) return std::nullopt;
  if (row_major && rows == 1) strides[1] = std::max<int64_t>(cols, 1);  // any stride is right for one row
  if (col_major && cols == 1) strides[2] = std::max<int64_t>(rows, 1);
  const int64_t extent = row_major ? rows * strides[1] : cols * strides[2];
  if (dims[0] == 1 || strides[0] == 0) {
    dims[0] = 1;
    strides[0] = extent;
  } else if (strides[0] < extent) {
    return std::nullopt;  // matrices that overlap
  }
  return memory::desc(dims, dtype, strides);
}

onednn::PrimitiveCache<dnnl::matmul>& primitives() {
  static onednn::PrimitiveCache<dnnl::matmul> cache;
  return cache;
}

std::optional<dnnl::matmul> make_matmul(const memory::desc& a, const memory::desc& b, const memory::desc* bias,
                                        const memory::desc& dst) {
  const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(a, b, *bias, dst) : dnnl::matmul::desc(a, b, dst);
  const dnnl::matmul::primitive_desc pd(desc, onednn::engine(), /*allow_empty=*/true);
  if (!pd) return std::nullopt;
  if (onednn::is_reference(pd)) return std::nullopt;  // Eigen is faster than that
  return dnnl::matmul(pd);
}

// An operand as the primitive reads it: its descriptor and memory. An f16
// operand is widened (exactly) into contiguous f32 scratch
// (onednn::compute_dtype): kernel scratch, as the Eigen path's widened
// operands were, not tensor memory.
struct MatmulOperand {
  std::optional<memory::desc> md;
  const void* data = nullptr;
  std::optional<Loaded<float>> widened;

  explicit MatmulOperand(const Tensor& t) {
    if (t.dtype() == kF16) {
      widened.emplace(t);
      md = memory::desc({t.size(0), t.size(1), t.size(2)}, memory::data_type::f32,
                        Dims{t.size(1) * t.size(2), t.size(2), 1});
      data = widened->data();
      return;
    }
    const std::optional<memory::data_type> type = onednn::data_type(t.dtype());
    if (type) md = matrix_desc(t, *type);
    data = t.data_ptr();
  }
};

bool declined(const Tensor& a, const Tensor& b, const Tensor& out, const char* why) {
  MT_CHECK(cpu_gemm_library() != CpuGemmLibrary::OneDnn, "MT_CPU_GEMM=onednn: oneDNN does not take {} @ {} -> {} ({})",
           a.shape_string(), b.shape_string(), out.shape_string(), why);
  return false;
}

}  // namespace

bool onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmEpilogue& epilogue) {
  if (cpu_gemm_library() == CpuGemmLibrary::Eigen) return false;
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (batch == 0 || m == 0 || n == 0 || k == 0) return false;  // nothing to multiply: the Eigen path fills it
  const auto src_type = onednn::data_type(onednn::compute_dtype(a.dtype()));
  if (!src_type || b.dtype() != a.dtype() || !onednn::data_type(onednn::compute_dtype(out.dtype()))) {
    return declined(a, b, out, "dtypes");
  }
  const MatmulOperand A(a), B(b);
  if (!A.md || !B.md) return declined(a, b, out, "strides");
  const memory::desc& a_md = *A.md;
  const memory::desc& b_md = *B.md;

  // Straight into out, then ReLU in place; GELU needs the f32 product first.
  const bool fused = (epilogue.activation == GemmActivation::None || epilogue.activation == GemmActivation::Relu) &&
                     out.is_contiguous() && onednn::data_type(out.dtype());
  const memory::data_type dst_type = fused ? *onednn::data_type(out.dtype()) : memory::data_type::f32;
  const memory::desc dst_md({batch, m, n}, dst_type, Dims{m * n, n, 1});
  std::optional<Loaded<float>> bias;
  std::optional<memory::desc> bias_md;
  if (epilogue.bias.defined()) {
    bias.emplace(epilogue.bias);
    bias_md = memory::desc({1, 1, n}, memory::data_type::f32, Dims{n, n, 1});
  }
  onednn::PrimitiveKey key = {omp_get_max_threads()};
  onednn::append(key, a_md);
  onednn::append(key, b_md);
  onednn::append(key, dst_md);
  if (bias_md) onednn::append(key, *bias_md);
  const std::optional<dnnl::matmul> matmul =
      primitives().get(key, [&] { return make_matmul(a_md, b_md, bias_md ? &*bias_md : nullptr, dst_md); });
  if (!matmul) return declined(a, b, out, "no optimised oneDNN kernel for this CPU");

  std::optional<OutputBuffer<float>> product;  // the f32 product, when the epilogue runs after
  if (!fused) product.emplace(out);
  void* dst = fused ? out.data_ptr() : product->data();
  const dnnl::engine& engine = onednn::engine();
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(a_md, engine, const_cast<void*>(A.data))},
                                          {DNNL_ARG_WEIGHTS, memory(b_md, engine, const_cast<void*>(B.data))},
                                          {DNNL_ARG_DST, memory(dst_md, engine, dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(*bias_md, engine, const_cast<float*>(bias->data())));
  matmul->execute(onednn::stream(), args);
  onednn::stream().wait();
  if (fused) {
    out.storage()->bump_version();
    if (epilogue.pre_activation.defined()) copy(out, epilogue.pre_activation);
    if (epilogue.activation == GemmActivation::Relu) unary(UnaryOp::Relu, out, out, {});
    return true;
  }

  std::optional<OutputBuffer<float>> pre;
  if (epilogue.pre_activation.defined()) pre.emplace(epilogue.pre_activation);
  float* c = product->data();
  float* p = pre ? pre->data() : nullptr;
  const bool to_16bit = out.dtype() != kF32;
  parallel_for(batch * m, n, [&](int64_t begin, int64_t end) {
    apply_epilogue(c, p, n, begin, end - begin, 0, n, static_cast<const float*>(nullptr), epilogue.activation,
                   to_16bit);
  });
  product->commit();
  if (pre) pre->commit();
  return true;
}

// ---- INT8 --------------------------------------------------------------

namespace {

// The INT8 matmul for one shape: u8 [m, k] x s8 [k, n] (the [n, k] weight
// read column-major) -> f32, the per-column scales and the activations'
// zero point given at run time.
std::optional<dnnl::matmul> make_int8_matmul(int64_t m, int64_t n, int64_t k) {
  const memory::desc a_md({m, k}, memory::data_type::u8, Dims{k, 1});
  const memory::desc b_md({k, n}, memory::data_type::s8, Dims{1, k});
  const memory::desc dst_md({m, n}, memory::data_type::f32, Dims{n, 1});
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, dst_md), attr, onednn::engine(),
                                        /*allow_empty=*/true);
  if (!pd || onednn::is_reference(pd)) return std::nullopt;
  return dnnl::matmul(pd);
}

}  // namespace

bool onednn_int8_gemm(const Int8Gemm& g, float* product) {
  if (cpu_gemm_library() == CpuGemmLibrary::Eigen || !onednn_int8_native()) return false;
  static onednn::PrimitiveCache<dnnl::matmul> cache;
  const std::optional<dnnl::matmul> matmul =
      cache.get({omp_get_max_threads(), g.m, g.n, g.k}, [&] { return make_int8_matmul(g.m, g.n, g.k); });
  if (!matmul) {
    MT_CHECK(cpu_gemm_library() != CpuGemmLibrary::OneDnn,
             "MT_CPU_GEMM=onednn: oneDNN has no optimised INT8 matmul for [{}, {}] x [{}, {}] on this CPU", g.m, g.k,
             g.k, g.n);
    return false;
  }
  const dnnl::engine& engine = onednn::engine();
  int32_t zero_point = g.a_zero_point;
  matmul->execute(
      onednn::stream(),
      {{DNNL_ARG_SRC, memory({{g.m, g.k}, memory::data_type::u8, Dims{g.k, 1}}, engine, const_cast<uint8_t*>(g.a))},
       {DNNL_ARG_WEIGHTS, memory({{g.k, g.n}, memory::data_type::s8, Dims{1, g.k}}, engine, const_cast<int8_t*>(g.b))},
       {DNNL_ARG_DST, memory({{g.m, g.n}, memory::data_type::f32, Dims{g.n, 1}}, engine, product)},
       {DNNL_ARG_ATTR_OUTPUT_SCALES,
        memory({{g.n}, memory::data_type::f32, Dims{1}}, engine, const_cast<float*>(g.scales))},
       {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
        memory({{1}, memory::data_type::s32, Dims{1}}, engine, &zero_point)}});
  onednn::stream().wait();
  return true;
}

}  // namespace mt::kernels::cpu
