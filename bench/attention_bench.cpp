// The attention ladder benchmark: every rung of kernels/attention/ladder side
// by side on the GPU.
//
//   attention_bench [--batch 8 --heads 16 --seq 1024 --dim 64] [--causal] [--min-ms 200]
//
// For f16 and bf16 it times the forward of v1 (the reference path:
// matmul -> softmax -> matmul, MT_ATTENTION=math), v2 (fused, scalar) and v3
// (fused, mma.sync), the backward of v2 and v3, and forward + backward of v1
// and of the fused op, and
// reports TFLOP/s (forward 4*B*H*Tq*Tk*D flops, halved when causal; backward
// counted as 2.5x the forward, as FlashAttention's papers do) and the largest
// difference from v1 relative to max |v1|. Exits 1 when a rung differs from
// v1 by more than the dtype's tolerance (so a small run doubles as the GPU
// correctness test), 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "kernels/attention/attention.h"
#include "mixtape.h"
#include "timing.h"

namespace {

using mt::bench::time_ms;

// max |a - b| / max |b|.
double relative_difference(const mt::Tensor& a, const mt::Tensor& b) {
  const double diff = mt::max(mt::abs(mt::sub(a.to(mt::kF32), b.to(mt::kF32)))).item_as_double();
  return diff / std::max(1e-30, mt::max(mt::abs(b.to(mt::kF32))).item_as_double());
}

void set_math_path(bool math) {
  if (math) {
    ::setenv("MT_ATTENTION", "math", 1);
  } else {
    ::unsetenv("MT_ATTENTION");
  }
}

struct Options {
  int64_t batch = 8, heads = 16, seq = 1024, dim = 64;
  bool causal = false;
  double min_ms = 200;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const auto is = [&](const char* flag) { return std::strcmp(argv[i], flag) == 0; };
    if (is("--causal")) {
      o.causal = true;
    } else if (i + 1 < argc && is("--batch")) {
      o.batch = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--heads")) {
      o.heads = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--seq")) {
      o.seq = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--dim")) {
      o.dim = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--min-ms")) {
      o.min_ms = std::atof(argv[++i]);
    }
  }
  return o;
}

void print_header(const Options& o) {
  std::printf("B=%lld H=%lld T=%lld D=%lld%s\n\n", static_cast<long long>(o.batch), static_cast<long long>(o.heads),
              static_cast<long long>(o.seq), static_cast<long long>(o.dim), o.causal ? " causal" : "");
  std::printf("| dtype | rung | ms | TFLOP/s | max diff vs v1 |\n|---|---|---|---|---|\n");
}

// One dtype's run: random q, k, v, the options every rung runs with, and
// how rows are timed and judged.
struct DtypeRun {
  mt::DType dtype;
  mt::Shape shape;
  mt::Tensor q, k, v;
  mt::AttentionOptions options;
  double tolerance;
  const char* name;
  double flops, min_ms;
};

DtypeRun make_run(const Options& o, mt::DType dtype, double flops) {
  using namespace mt;
  DtypeRun r;
  r.dtype = dtype;
  r.shape = Shape{o.batch, o.heads, o.seq, o.dim};
  r.q = randn(r.shape, kF32).to(dtype).to(kCUDA);
  r.k = randn(r.shape, kF32).to(dtype).to(kCUDA);
  r.v = randn(r.shape, kF32).to(dtype).to(kCUDA);
  r.options.is_causal = o.causal;
  r.tolerance = dtype == kF16 ? 4e-3 : 2e-2;
  r.name = dtype_name(dtype).data();
  r.flops = flops;
  r.min_ms = o.min_ms;
  return r;
}

// v1's forward (the math path), the reference of every rung.
mt::Tensor time_unfused_forward(const DtypeRun& r) {
  using namespace mt;
  Tensor reference;
  NoGradGuard no_grad;
  set_math_path(true);
  reference = scaled_dot_product_attention(r.q, r.k, r.v, r.options);
  const double ms = time_ms([&] { scaled_dot_product_attention(r.q, r.k, r.v, r.options); }, r.min_ms);
  std::printf("| %s | v1 unfused forward | %.3f | %.1f | 0 |\n", r.name, ms, r.flops / (ms * 1e9));
  set_math_path(false);
  return reference;
}

// A fused rung's forward into out and lse; false when it differs from v1
// beyond the tolerance.
bool time_rung_forward(const DtypeRun& r, const mt::kernels::AttentionProblem& problem,
                       mt::kernels::AttentionKernel kernel, const mt::Tensor& reference, const mt::Tensor& out,
                       const mt::Tensor& lse) {
  using namespace mt;
  const auto run = [&] { kernels::attention_forward(r.q, r.k, r.v, Tensor(), Tensor(), problem, kernel, out, lse); };
  const double ms = time_ms(run, r.min_ms);
  const double diff = relative_difference(out, reference);
  std::printf("| %s | %s forward | %.3f | %.1f | %.2e |\n", r.name, kernels::attention_kernel_name(kernel), ms,
              r.flops / (ms * 1e9), diff);
  return diff <= r.tolerance;
}

// The rung's backward alone, from the forward's out and lse (grad_q compared
// with v2's); false when it differs beyond twice the tolerance.
bool time_rung_backward(const DtypeRun& r, const mt::kernels::AttentionProblem& problem,
                        mt::kernels::AttentionKernel kernel, const mt::Tensor& out, const mt::Tensor& lse,
                        mt::Tensor& v2_grad_q) {
  using namespace mt;
  const Shape& shape = r.shape;
  const DType dtype = r.dtype;
  const Tensor grad_out = randn(shape, kF32).to(dtype).to(kCUDA);
  const Tensor dq = empty(shape, dtype, kCUDA), dk = empty(shape, dtype, kCUDA), dv = empty(shape, dtype, kCUDA);
  const auto backward = [&] {
    kernels::attention_backward(r.q, r.k, r.v, Tensor(), Tensor(), out, lse, grad_out, problem, kernel, dq, dk, dv);
  };
  const double backward_ms = time_ms(backward, r.min_ms);
  if (kernel != kernels::AttentionKernel::V2Scalar) {
    const double grad_diff = relative_difference(dq, v2_grad_q);
    std::printf("| %s | %s backward | %.3f | %.1f | %.2e (grad q vs v2) |\n", r.name,
                kernels::attention_kernel_name(kernel), backward_ms, 2.5 * r.flops / (backward_ms * 1e9), grad_diff);
    return grad_diff <= 2 * r.tolerance;
  }
  v2_grad_q = dq.clone();
  std::printf("| %s | %s backward | %.3f | %.1f | |\n", r.name, kernels::attention_kernel_name(kernel), backward_ms,
              2.5 * r.flops / (backward_ms * 1e9));
  return true;
}

// v2 and v3 (v3 only at head dim 64 or 128), forward then backward.
bool time_fused_rungs(const Options& o, const DtypeRun& r, const mt::Tensor& reference) {
  using namespace mt;
  const kernels::AttentionProblem problem =
      kernels::attention_problem(r.q, r.k, r.v, 1.0 / std::sqrt(double(o.dim)), o.causal);
  bool ok = true;
  Tensor v2_grad_q;
  for (const auto kernel : {kernels::AttentionKernel::V2Scalar, kernels::AttentionKernel::V3TensorCore}) {
    if (kernel == kernels::AttentionKernel::V3TensorCore && o.dim != 64 && o.dim != 128) continue;
    const Tensor out = empty(r.shape, r.dtype, kCUDA), lse = empty({o.batch, o.heads, o.seq}, kF32, kCUDA);
    ok = time_rung_forward(r, problem, kernel, reference, out, lse) && ok;
    ok = time_rung_backward(r, problem, kernel, out, lse, v2_grad_q) && ok;
  }
  return ok;
}

// Forward + backward through autograd: v1 (the math path), then the fused op.
void time_forward_backward(const DtypeRun& r) {
  using namespace mt;
  for (const bool math : {true, false}) {
    set_math_path(math);
    const Tensor ql = r.q.detach().requires_grad_(true), kl = r.k.detach().requires_grad_(true);
    const Tensor vl = r.v.detach().requires_grad_(true);
    const Tensor grad = ones(r.shape, r.dtype, kCUDA);
    const auto step = [&] { scaled_dot_product_attention(ql, kl, vl, r.options).backward(grad); };
    const double ms = time_ms(step, r.min_ms);
    std::printf("| %s | %s forward + backward | %.3f | %.1f | |\n", r.name, math ? "v1 unfused" : "fused op", ms,
                3.5 * r.flops / (ms * 1e9));
  }
}

// One dtype's rows; false when a rung differs from v1 beyond the tolerance.
bool bench_dtype(const Options& o, mt::DType dtype, double flops) {
  const DtypeRun r = make_run(o, dtype, flops);
  const mt::Tensor reference = time_unfused_forward(r);
  const bool ok = time_fused_rungs(o, r, reference);
  time_forward_backward(r);
  set_math_path(false);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "attention_bench: no GPU\n");
    return 77;
  }
  const Options o = parse_options(argc, argv);
  const double flops = 4.0 * static_cast<double>(o.batch * o.heads * o.seq) * static_cast<double>(o.seq * o.dim) *
                       (o.causal ? 0.5 : 1.0);
  print_header(o);
  bool ok = true;
  for (mt::DType dtype : {mt::kF16, mt::kBF16}) ok = bench_dtype(o, dtype, flops) && ok;
  return ok ? 0 : 1;
}
