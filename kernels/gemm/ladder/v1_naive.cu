// GEMM ladder, version 1: the naive kernel.
//
// What: C[b] = op(A[b]) @ op(B[b]) (+ bias, ReLU) for every layout and dtype
//   (f64, f32, f16, bf16); see ../api.h for the argument conventions.
// Algorithm: one thread per output element; it walks the K dimension reading
//   one row of op(A) and one column of op(B) straight from global memory.
//   threadIdx.x runs along N, so a warp reads 32 neighbouring B elements
//   (coalesced for row-major B) while all of its lanes read the same A element
//   (a broadcast). Nothing is reused on chip: every output re-reads 2K values.
// Precision: products accumulate in f32 (f64 for f64 inputs) in k order; the
//   bias is added in the accumulator type and C is rounded once.
// Bound: memory/latency-bound — 2 loads per fused multiply-add, so at 4096^3
//   it is limited by L2/DRAM traffic, nowhere near the Tensor Core roofline.
//   It is the frozen correctness baseline of the ladder.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md): 4096^3 f16 4.7 TFLOP/s, f32 5.2 —
//   0.7% of cuBLASLt in f16, 10% in f32.
#include "kernels/gemm/ladder/gemm_common.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kBlock = 16;

template <typename E>
__global__ void __launch_bounds__(kBlock* kBlock)
    gemm_v1_kernel(kernels::GemmArgs args, gemm_detail::OperandStrides sa, gemm_detail::OperandStrides sb) {
  using Storage = typename E::Storage;
  using Acc = typename E::Acc;
  const int col = static_cast<int>(blockIdx.x * kBlock + threadIdx.x);
  const int row = static_cast<int>(blockIdx.y * kBlock + threadIdx.y);
  const int batch = static_cast<int>(blockIdx.z);
  if (row >= args.m || col >= args.n) return;
  const Storage* a = static_cast<const Storage*>(args.a) + batch * args.batch_stride_a + row * sa.row;
  const Storage* b = static_cast<const Storage*>(args.b) + batch * args.batch_stride_b + col * sb.col;
  Acc sum = 0;
  for (int k = 0; k < args.k; ++k) sum += E::to_acc(a[k * sa.col]) * E::to_acc(b[k * sb.row]);
  gemm_detail::store_output<E>(args, batch, row, col, sum);
}

}  // namespace

void gemm_v1_naive(const kernels::GemmArgs& args, Stream stream) {
  gemm_detail::check_args(args, "gemm_v1_naive");
  element::visit(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if (gemm_detail::handle_degenerate<E>(args, stream)) return;
    const dim3 grid(gemm_detail::ceil_div(args.n, kBlock), gemm_detail::ceil_div(args.m, kBlock), args.batch);
    launch("gemm_v1_kernel", gemm_v1_kernel<E>, grid, dim3(kBlock, kBlock), 0, stream, args,
           gemm_detail::a_strides(args), gemm_detail::b_strides(args));
  });
}

}  // namespace mt::MT_KERNEL_NS
