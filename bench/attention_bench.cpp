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

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "attention_bench: no GPU\n");
    return 77;
  }
  int64_t batch = 8, heads = 16, seq = 1024, dim = 64;
  bool causal = false;
  double min_ms = 200;
  for (int i = 1; i < argc; ++i) {
    const auto is = [&](const char* flag) { return std::strcmp(argv[i], flag) == 0; };
    if (is("--causal")) {
      causal = true;
    } else if (i + 1 < argc && is("--batch")) {
      batch = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--heads")) {
      heads = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--seq")) {
      seq = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--dim")) {
      dim = std::atoll(argv[++i]);
    } else if (i + 1 < argc && is("--min-ms")) {
      min_ms = std::atof(argv[++i]);
    }
  }
  using namespace mt;
  const double flops =
      4.0 * static_cast<double>(batch * heads * seq) * static_cast<double>(seq * dim) * (causal ? 0.5 : 1.0);
  std::printf("B=%lld H=%lld T=%lld D=%lld%s\n\n", static_cast<long long>(batch), static_cast<long long>(heads),
              static_cast<long long>(seq), static_cast<long long>(dim), causal ? " causal" : "");
  std::printf("| dtype | rung | ms | TFLOP/s | max diff vs v1 |\n|---|---|---|---|---|\n");
  bool ok = true;
  for (DType dtype : {kF16, kBF16}) {
    const Shape shape{batch, heads, seq, dim};
    const Tensor q = randn(shape, kF32).to(dtype).to(kCUDA);
    const Tensor k = randn(shape, kF32).to(dtype).to(kCUDA);
    const Tensor v = randn(shape, kF32).to(dtype).to(kCUDA);
    AttentionOptions options;
    options.is_causal = causal;
    const double tolerance = dtype == kF16 ? 4e-3 : 2e-2;
    const char* name = dtype_name(dtype).data();
    Tensor reference;
    {
      NoGradGuard no_grad;
      set_math_path(true);
      reference = scaled_dot_product_attention(q, k, v, options);
      const double ms = time_ms([&] { scaled_dot_product_attention(q, k, v, options); }, min_ms);
      std::printf("| %s | v1 unfused forward | %.3f | %.1f | 0 |\n", name, ms, flops / (ms * 1e9));
      set_math_path(false);
    }
    const kernels::AttentionProblem problem = kernels::attention_problem(q, k, v, 1.0 / std::sqrt(double(dim)), causal);
    Tensor v2_grad_q;
    for (const auto kernel : {kernels::AttentionKernel::V2Scalar, kernels::AttentionKernel::V3TensorCore}) {
      if (kernel == kernels::AttentionKernel::V3TensorCore && dim != 64 && dim != 128) continue;
      const Tensor out = empty(shape, dtype, kCUDA), lse = empty({batch, heads, seq}, kF32, kCUDA);
      const auto run = [&] { kernels::attention_forward(q, k, v, Tensor(), Tensor(), problem, kernel, out, lse); };
      const double ms = time_ms(run, min_ms);
      const double diff = relative_difference(out, reference);
      ok = ok && diff <= tolerance;
      std::printf("| %s | %s forward | %.3f | %.1f | %.2e |\n", name, kernels::attention_kernel_name(kernel), ms,
                  flops / (ms * 1e9), diff);
      // The rung's backward alone, from the forward's out and lse (grad_q compared with v2's).
      const Tensor grad_out = randn(shape, kF32).to(dtype).to(kCUDA);
      const Tensor dq = empty(shape, dtype, kCUDA), dk = empty(shape, dtype, kCUDA), dv = empty(shape, dtype, kCUDA);
      const auto backward = [&] {
        kernels::attention_backward(q, k, v, Tensor(), Tensor(), out, lse, grad_out, problem, kernel, dq, dk, dv);
      };
      const double backward_ms = time_ms(backward, min_ms);
      if (kernel == kernels::AttentionKernel::V2Scalar) {
        v2_grad_q = dq.clone();
      } else {
        const double grad_diff = relative_difference(dq, v2_grad_q);
        ok = ok && grad_diff <= 2 * tolerance;
        std::printf("| %s | %s backward | %.3f | %.1f | %.2e (grad q vs v2) |\n", name,
                    kernels::attention_kernel_name(kernel), backward_ms, 2.5 * flops / (backward_ms * 1e9), grad_diff);
        continue;
      }
      std::printf("| %s | %s backward | %.3f | %.1f | |\n", name, kernels::attention_kernel_name(kernel), backward_ms,
                  2.5 * flops / (backward_ms * 1e9));
    }
    for (const bool math : {true, false}) {
      set_math_path(math);
      const Tensor ql = q.detach().requires_grad_(true), kl = k.detach().requires_grad_(true);
      const Tensor vl = v.detach().requires_grad_(true);
      const Tensor grad = ones(shape, dtype, kCUDA);
      const auto step = [&] { scaled_dot_product_attention(ql, kl, vl, options).backward(grad); };
      const double ms = time_ms(step, min_ms);
      std::printf("| %s | %s forward + backward | %.3f | %.1f | |\n", name, math ? "v1 unfused" : "fused op", ms,
                  3.5 * flops / (ms * 1e9));
    }
    set_math_path(false);
  }
  return ok ? 0 : 1;
}
