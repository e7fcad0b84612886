// INT8 inference's GEMM through the vendor's INT8 GEMM (cuBLASLt on a GPU).
//
// What: Int8Gemm's formula (kernels/gemm/api.h): u8 activations A with one
//   zero point z, s8 weights B [n, k], s32 sums, then the column's scale,
//   bias and activation. cuBLASLt's INT8 kernels (IMMA) multiply s8 by s8
//   only, so the u8 side is moved into s8 first and moved back in s32.
// How: three steps around the vendor's product.
//   1. shift: a u8 byte a read as s8 after flipping its top bit is a - 128,
//      so A' = A - 128 exactly (one byte per thread, grid-stride).
//   2. the s8 GEMM: P = A' B^T in s32. On a GPU cuBLASLt's
//      (int8_s8_gemm_cublaslt in cuda.cu); on the simulator, which has no
//      cuBLASLt, a plain loop (one thread per output) stands in, as ladder
//      v1 stands in for cuBLASLt's float GEMM there.
//   3. epilogue: sum_k (a - z) b = sum_k (a - 128) b + (128 - z) sum_k b,
//      so out = P + (128 - z) * (column n's weight sum), a warp summing each
//      weight row first; then the s32 -> f32, scale, bias, activation and
//      rounding v9 uses (gemm_common.h's store_int8_output).
// Precision: exact in s32 up to the epilogue (|P| <= 128 * 128 * k, the
//   correction at most 128 * 128 * k too: no k mixtape runs comes near
//   2^31), and the epilogue is v9's, so the output equals v9's and the
//   CPU's (kernels/gemm/int8.cpp) bit for bit.
// Bound: steps 1 and 3 are memory passes (A's m*k bytes read and written;
//   the s32 product's 4mn bytes written by the GEMM and read back, f32 or
//   bf16 written). Folding step 3 into cuBLASLt's own epilogue (a bias
//   vector, output scales) is not tried: its rounding would then be
//   cuBLASLt's, and the two paths would no longer agree bit for bit.
// Speed: not measured: no GPU has run it (the simulator runs its steps).
#include <stdexcept>
#include <string>

#include "kernels/gemm/api.h"
#include "kernels/gemm/ladder/gemm_common.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

unsigned blocks_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__global__ void shift_u8_to_s8_kernel(const std::uint8_t* a, std::int8_t* out, std::int64_t count) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    out[i] = static_cast<std::int8_t>(a[i] ^ 0x80u);
  }
}

// sums[n] = sum_k b[n, k]: a warp per weight row, its lanes striding the row
// and adding their partial sums with shuffles (exact: integers).
__global__ void weight_sums_kernel(const std::int8_t* b, std::int64_t n, std::int64_t k, std::int32_t* sums) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;  // whole warps leave together: a row is one warp's
  std::int32_t sum = 0;
  for (std::int64_t c = lane; c < k; c += 32) sum += b[row * k + c];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) sums[row] = sum;
}

// The simulator's stand-in for cuBLASLt's s8 GEMM: product[m, n] = sum_k
// a_s8[m, k] b[n, k], one thread per output.
[[maybe_unused]] __global__ void s8_gemm_stand_in_kernel(const std::int8_t* a, const std::int8_t* b, std::int64_t m,
                                                         std::int64_t n, std::int64_t k, std::int32_t* product) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n; i += step) {
    const std::int8_t* row = a + (i / n) * k;
    const std::int8_t* weight = b + (i % n) * k;
    std::int32_t sum = 0;
    for (std::int64_t c = 0; c < k; ++c) sum += std::int32_t{row[c]} * std::int32_t{weight[c]};
    product[i] = sum;
  }
}

template <bool OutBf16>
__global__ void vendor_epilogue_kernel(kernels::Int8Gemm g, const std::int32_t* product, const std::int32_t* sums,
                                       void* out) {
  const std::int32_t correction = 128 - g.a_zero_point;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.m * g.n; i += step) {
    const std::int64_t row = i / g.n, col = i % g.n;
    gemm_detail::store_int8_output<OutBf16>(g, row, col, product[i] + correction * sums[col], out);
  }
}

}  // namespace

void int8_gemm_vendor(const kernels::Int8Gemm& g, const kernels::Int8VendorScratch& scratch, void* out, bool out_bf16,
                      Stream stream) {
  if (g.m < 0 || g.n < 0 || g.a_zero_point < 0 || g.a_zero_point > 255 || !kernels::int8_vendor_takes(g)) {
    throw std::invalid_argument(
        "int8_gemm_vendor: cuBLASLt's INT8 GEMM takes k > 0, n and k multiples of 4, a "
        "4-byte aligned weight and a zero point in [0, 255] (m=" +
        std::to_string(g.m) + ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) + ")");
  }
  if (g.m == 0 || g.n == 0) return;
  if (g.a == nullptr || g.b == nullptr || g.scales == nullptr || out == nullptr || scratch.a_s8 == nullptr ||
      scratch.weight_sums == nullptr || scratch.product == nullptr) {
    throw std::invalid_argument("int8_gemm_vendor: a null operand or scratch buffer");
  }
  kernels::declare_launch_work(2.0 * static_cast<double>(g.m * g.k));
  launch("int8_shift_u8_to_s8_kernel", shift_u8_to_s8_kernel, dim3(blocks_for(g.m * g.k)), dim3(kThreads), 0, stream,
         g.a, scratch.a_s8, g.m * g.k);
  constexpr int kRowsPerBlock = kThreads / 32;
  kernels::declare_launch_work(static_cast<double>(g.n * g.k + 4 * g.n));
  launch("int8_weight_sums_kernel", weight_sums_kernel,
         dim3(static_cast<unsigned>((g.n + kRowsPerBlock - 1) / kRowsPerBlock)), dim3(kThreads), 0, stream, g.b, g.n,
         g.k, scratch.weight_sums);
#if MT_SIM_BUILD
  kernels::declare_launch_work(static_cast<double>(g.m * g.k + g.n * g.k + 4 * g.m * g.n),
                               2.0 * static_cast<double>(g.m * g.n * g.k));
  launch("int8_s8_gemm_stand_in_kernel", s8_gemm_stand_in_kernel, dim3(blocks_for(g.m * g.n)), dim3(kThreads), 0,
         stream, static_cast<const std::int8_t*>(scratch.a_s8), g.b, g.m, g.n, g.k, scratch.product);
#else
  int8_s8_gemm_cublaslt(g.m, g.n, g.k, scratch.a_s8, g.b, scratch.product, stream);
#endif
  kernels::declare_launch_work(static_cast<double>(g.m * g.n) * (out_bf16 ? 6.0 : 8.0));
  if (out_bf16) {
    launch("int8_vendor_epilogue_kernel", vendor_epilogue_kernel<true>, dim3(blocks_for(g.m * g.n)), dim3(kThreads), 0,
           stream, g, static_cast<const std::int32_t*>(scratch.product),
           static_cast<const std::int32_t*>(scratch.weight_sums), out);
  } else {
    launch("int8_vendor_epilogue_kernel", vendor_epilogue_kernel<false>, dim3(blocks_for(g.m * g.n)), dim3(kThreads), 0,
           stream, g, static_cast<const std::int32_t*>(scratch.product),
           static_cast<const std::int32_t*>(scratch.weight_sums), out);
  }
}

}  // namespace mt::MT_KERNEL_NS
