// GEMM ladder, version 2: shared-memory tiles.
//
// What: as v1 (every layout, f64/f32/f16/bf16, bias + ReLU epilogue).
// Algorithm: a 16x16 thread block owns a 16x16 tile of C. It walks K in steps
//   of 16: each thread copies one element of the A tile and one of the B tile
//   into shared memory, the block synchronises, then every thread does 16
//   multiply-adds from shared memory. Each global element is now read once
//   per tile instead of once per output: 16x less global traffic than v1.
//   Elements are widened to the accumulator type as they enter shared memory;
//   out-of-range elements (ragged M, N, K) are stored as zeros, so the inner
//   loop needs no bounds checks.
// Precision: f32 accumulation (f64 for f64), one rounding on store.
// Bound: still memory/latency-bound: 2 shared-memory loads per FMA, one
//   output per thread, and a barrier every 16 k. Production uses it for f64.
// Speed (H200, 2026-11-29, bench/results/gpu_check_20261129_2204.md): 4096^3 f16 8.0 TFLOP/s,
//   f32 7.8 (1.2% / 15% of cuBLASLt).
#include "kernels/gemm/ladder/gemm_common.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kTile = 16;

template <typename E>
__global__ void __launch_bounds__(kTile* kTile)
    gemm_v2_kernel(kernels::GemmArgs args, gemm_detail::OperandStrides sa, gemm_detail::OperandStrides sb) {
  using Storage = typename E::Storage;
  using Acc = typename E::Acc;
  __shared__ Acc a_tile[kTile][kTile];      // [m][k]
  __shared__ Acc b_tile[kTile][kTile + 1];  // [k][n]; +1 keeps column walks off one bank
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int col = static_cast<int>(blockIdx.x) * kTile + tx;
  const int row = static_cast<int>(blockIdx.y) * kTile + ty;
  const int batch = static_cast<int>(blockIdx.z);
  const Storage* a = static_cast<const Storage*>(args.a) + batch * args.batch_stride_a;
  const Storage* b = static_cast<const Storage*>(args.b) + batch * args.batch_stride_b;
  Acc sum = 0;
  for (int k0 = 0; k0 < args.k; k0 += kTile) {
    // Thread (tx, ty) loads A(row, k0 + tx) and B(k0 + ty, col).
    const int ka = k0 + tx, kb = k0 + ty;
    a_tile[ty][tx] = (row < args.m && ka < args.k) ? E::to_acc(a[row * sa.row + ka * sa.col]) : Acc(0);
    b_tile[ty][tx] = (kb < args.k && col < args.n) ? E::to_acc(b[kb * sb.row + col * sb.col]) : Acc(0);
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) sum += a_tile[ty][kk] * b_tile[kk][tx];
    __syncthreads();  // the next iteration overwrites the tiles
  }
  gemm_detail::store_output<E>(args, batch, row, col, sum);
}

}  // namespace

void gemm_v2_shared_tiles(const kernels::GemmArgs& args, Stream stream) {
  gemm_detail::check_args(args, "gemm_v2_shared_tiles");
  element::visit(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if (gemm_detail::handle_degenerate<E>(args, stream)) return;
    const dim3 grid(gemm_detail::ceil_div(args.n, kTile), gemm_detail::ceil_div(args.m, kTile), args.batch);
    launch("gemm_v2_kernel", gemm_v2_kernel<E>, grid, dim3(kTile, kTile), 0, stream, args, gemm_detail::a_strides(args),
           gemm_detail::b_strides(args));
  });
}

}  // namespace mt::MT_KERNEL_NS
