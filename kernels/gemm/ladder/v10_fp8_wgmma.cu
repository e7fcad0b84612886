// GEMM ladder, version 10: FP8 on Hopper's Tensor Cores, with scales.
//
// What: the FP8 recipes' GEMM (kernels/gemm/api.h, Fp8Gemm): A [m, k] and
//   B [n, k] in E4M3 or E5M2 (E4M3 x E4M3 forward, E5M2 x E4M3 for the
//   gradient times the weight), per-tensor scales or DeepSeek-V3's block
//   scales (A per 1 x 128 tile, B per 128 x 128 block), f32 or bf16 out with
//   the bias/ReLU/GELU epilogue of the other rungs.
// Algorithm: v7's warp specialisation, one 128 x 128 tile per block (not
//   persistent): warpgroup 0's one thread streams 128-deep K slices of A and
//   B by TMA into a 4-stage ring (each slice is one 128-byte swizzle row of
//   FP8 per row, 32 KB a stage); warpgroups 1 and 2 each own 64 rows and
//   multiply a slice with four wgmma m64n128k32 (FP8 wgmma is k32: the same
//   32 bytes of each row as f16's k16, so the descriptors are v6's).
// Precision: the products are exact; the sum is where FP8 differs. Hopper's
//   FP8 Tensor Cores add into the accumulator with fewer bits than f32
//   (DeepSeek-V3 measured about 14 on H800: a 2% largest error at K = 4096).
//   So each slice's four wgmmas start a fresh partial sum, and the consumer
//   adds it, times that K block's scales, into f32 registers: "promotion
//   every 128 of K", which is also exactly where block scales change. The
//   other warpgroup's wgmmas keep the Tensor Cores busy meanwhile.
//   `promote = false` (per-tensor scales) keeps the whole K in the Tensor
//   Core's accumulator and scales once: on the simulator's narrow-accumulator
//   model (simulator::set_fp8_accumulator_bits(14)) it misses a 1e-3
//   accuracy check at K = 4096 that the promoted kernel passes
//   (tests/kernels/test_fp8_gemm_rung.cpp). One rounding, into out.
// Bound: compute, at 2x BF16's Tensor Core rate on H100/H200 (FP8 dense
//   ~1979 TFLOP/s vs 989): the promotion's FMAs and the scale loads are
//   per slice, not per k. Left on the table: a persistent grid and
//   clusters (v7, v8), overlapping the promotion with the same warpgroup's
//   next slice (wait_group<1> with two partial sums), a TMA-store epilogue.
// Speed: not measured: no GPU has run it (tested on the simulator only).
//   The FP8 Linear's GEMMs run it on sim and CUDA (kernels/gemm/fp8.h; on a
//   GPU only once verified there, and under MT_GEMM=auto against cuBLASLt's FP8).
#include <stdexcept>
#include <string>

#include "kernels/gemm/ladder/hopper_tiles.h"

namespace mt::MT_KERNEL_NS {
namespace {

using std::uint64_t;
using std::uint8_t;

constexpr int kTile = 128;  // M and N of a block tile; also K of a slice and of a scale block
constexpr int kStages = 4;
constexpr int kThreads = 3 * 128;
constexpr int kConsumerWarps = 8;
constexpr unsigned kSliceBytes = kTile * kTile;  // one operand's 128 rows x 128 bytes
constexpr unsigned kStageBytes = 2 * kSliceBytes;
constexpr std::size_t kSharedBytes = kStages * kStageBytes + 2 * kStages * sizeof(uint64_t) + 1024;
constexpr unsigned kSwizzleAtom = 1024;  // 8 rows of 128 bytes

// The descriptor of k32 step `kk` of a K-major tile from its first row: 8-row
// groups 1024 bytes apart, the step 32 bytes along the 128-byte rows.
__device__ __forceinline__ uint64_t slice_descriptor(const uint8_t* tile, int kk) {
  return ptx::matrix_descriptor(tile + kk * 32, 16, kSwizzleAtom, ptx::Swizzle::B128);
}

// The scale of row (or column block) `index`, K block `g`.
__device__ __forceinline__ float scale_at(const float* scales, bool blocks, int index, int g, int k_blocks) {
  return blocks ? scales[static_cast<int64_t>(index) * k_blocks + g] : scales[0];
}

template <bool AE5M2, bool BE5M2, typename EOut>
__global__ void __launch_bounds__(kThreads, 1)
    v10_kernel(const __grid_constant__ kernels::TensorMap map_a, const __grid_constant__ kernels::TensorMap map_b,
               kernels::Fp8Gemm g, kernels::GemmArgs epilogue) {
  MT_DYNAMIC_SHARED(unsigned char, raw);
  auto* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
  auto* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
  }
  __syncthreads();  // the last block-wide barrier: from here on only mbarriers
  const int row0 = static_cast<int>(blockIdx.y) * kTile, col0 = static_cast<int>(blockIdx.x) * kTile;
  const int slices = (g.k + kTile - 1) / kTile;
  const int warpgroup = static_cast<int>(threadIdx.x / 128);
  if (warpgroup == 0) {
    ptx::setmaxnreg<40, false>();
    if (threadIdx.x != 0) return;
    for (int slice = 0; slice < slices; ++slice) {
      const int stage = slice % kStages;
      ptx::mbarrier_wait(&empty[stage], (static_cast<unsigned>(slice / kStages) & 1u) ^ 1u);
      uint8_t* a = stages + stage * kStageBytes;
      ptx::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
      ptx::tensor_copy_2d(a, &map_a, slice * kTile, row0, &full[stage]);
      ptx::tensor_copy_2d(a + kSliceBytes, &map_b, slice * kTile, col0, &full[stage]);
    }
    return;
  }
  ptx::setmaxnreg<232, true>();
  const int consumer = warpgroup - 1;
  const int warp = static_cast<int>((threadIdx.x % 128) / 32), lane = static_cast<int>(threadIdx.x % 32);
  // This thread's two accumulator rows (the m64nN fragment of ptx_hopper.h).
  const int row_a = row0 + consumer * 64 + warp * 16 + lane / 4, row_b = row_a + 8;
  float partial[kTile / 2], acc[kTile / 2];
  MT_UNROLL
  for (int i = 0; i < kTile / 2; ++i) acc[i] = 0.0f;
  for (int slice = 0; slice < slices; ++slice) {
    const int stage = slice % kStages;
    ptx::mbarrier_wait(&full[stage], static_cast<unsigned>(slice / kStages) & 1u);
    const uint8_t* a = stages + stage * kStageBytes + consumer * 64 * kTile;
    const uint8_t* b = stages + stage * kStageBytes + kSliceBytes;
    ptx::fence_accumulators(partial);
    ptx::wgmma_fence();
    MT_UNROLL
    for (int kk = 0; kk < kTile / 32; ++kk) {
      const bool accumulate = kk > 0 || (!g.promote && slice > 0);
      ptx::wgmma_m64k32_fp8<kTile, AE5M2, BE5M2>(partial, slice_descriptor(a, kk), slice_descriptor(b, kk), accumulate);
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::fence_accumulators(partial);
    if (lane == 0) ptx::mbarrier_arrive(&empty[stage]);  // the slice is read: the producer may refill it
    if (g.promote) {
      const int k_blocks = slices;
      const float b_scale = scale_at(g.b_scale_inv, g.block_scales, col0 / kTile, slice, k_blocks);
      const float scale_a = row_a < g.m ? scale_at(g.a_scale_inv, g.block_scales, row_a, slice, k_blocks) : 0.0f;
      const float scale_b = row_b < g.m ? scale_at(g.a_scale_inv, g.block_scales, row_b, slice, k_blocks) : 0.0f;
      MT_UNROLL
      for (int i = 0; i < kTile / 8; ++i) {
        acc[4 * i + 0] += partial[4 * i + 0] * (scale_a * b_scale);
        acc[4 * i + 1] += partial[4 * i + 1] * (scale_a * b_scale);
        acc[4 * i + 2] += partial[4 * i + 2] * (scale_b * b_scale);
        acc[4 * i + 3] += partial[4 * i + 3] * (scale_b * b_scale);
      }
    }
  }
  if (!g.promote) {  // one scale for the whole K (per-tensor scales)
    const float scale = g.a_scale_inv[0] * g.b_scale_inv[0];
    MT_UNROLL
    for (int i = 0; i < kTile / 2; ++i) acc[i] = partial[i] * scale;
  }
  hopper::store_fragment<EOut, kTile>(epilogue, 0, row0 + consumer * 64, col0, acc);
}

// A [rows, k] FP8 operand's tensor map: boxes of 128 rows x 128 bytes, 128-byte swizzle.
kernels::TensorMap operand_map(const uint8_t* data, int rows, int k) {
  kernels::TensorMapSpec spec;
  spec.bytes = true;
  spec.address = data;
  spec.rank = 2;
  spec.dims[0] = static_cast<std::uint64_t>(k);
  spec.dims[1] = static_cast<std::uint64_t>(rows);
  spec.strides[1] = static_cast<std::uint64_t>(k);
  spec.box[0] = kTile;
  spec.box[1] = kTile;
  spec.swizzle_bytes = 128;
  kernels::TensorMap map{};
  encode_tensor_map(map, spec);
  return map;
}

void check(const kernels::Fp8Gemm& g) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("fp8_gemm_v10_wgmma: " + why); };
  if (g.m < 0 || g.n < 0 || g.k < 0) refuse("negative size");
  if (g.k % 16 != 0) refuse("k = " + std::to_string(g.k) + " is not a multiple of 16 (TMA's row stride)");
  if (g.a == nullptr || g.b == nullptr || g.out == nullptr || g.a_scale_inv == nullptr || g.b_scale_inv == nullptr)
    refuse("an operand, a scale or out is null");
  if (reinterpret_cast<std::uintptr_t>(g.a) % 16 != 0 || reinterpret_cast<std::uintptr_t>(g.b) % 16 != 0)
    refuse("A and B must be 16-byte aligned");
  if (g.out_dtype != kernels::KernelDType::F32 && g.out_dtype != kernels::KernelDType::BF16)
    refuse("out must be f32 or bf16");
  if (!g.promote && g.block_scales) refuse("block scales change every 128 of K: they need promote");
  if (g.b_e5m2) refuse("B in E5M2: the recipes' products are E4M3 x E4M3 and E5M2 (gradients) x E4M3");
}

template <bool AE5M2, bool BE5M2>
void launch_v10(const kernels::Fp8Gemm& g, Stream stream) {
  kernels::GemmArgs epilogue;
  epilogue.dtype = g.out_dtype;
  epilogue.m = g.m, epilogue.n = g.n, epilogue.k = g.k;
  epilogue.c = g.out, epilogue.ldc = g.n;
  epilogue.bias = g.bias;
  epilogue.activation = g.activation;
  const kernels::TensorMap map_a = operand_map(g.a, g.m, g.k), map_b = operand_map(g.b, g.n, g.k);
  const double m = g.m, n = g.n, k = g.k, out_bytes = g.out_dtype == kernels::KernelDType::F32 ? 4 : 2;
  kernels::declare_launch_work(m * k + n * k + m * n * out_bytes, 2 * m * n * k);
  const dim3 grid(static_cast<unsigned>(gemm_detail::ceil_div(g.n, kTile)),
                  static_cast<unsigned>(gemm_detail::ceil_div(g.m, kTile)));
  if (g.out_dtype == kernels::KernelDType::F32) {
    launch("fp8_gemm_v10_kernel", v10_kernel<AE5M2, BE5M2, element::F32>, grid, dim3(kThreads), kSharedBytes, stream,
           map_a, map_b, g, epilogue);
  } else {
    launch("fp8_gemm_v10_kernel", v10_kernel<AE5M2, BE5M2, element::BF16>, grid, dim3(kThreads), kSharedBytes, stream,
           map_a, map_b, g, epilogue);
  }
}

}  // namespace

void fp8_gemm_v10_wgmma(const kernels::Fp8Gemm& g, Stream stream) {
  check(g);
  if (g.m == 0 || g.n == 0) return;
#if !MT_SIM_BUILD
  if (hopper::current_device_facts().major != 9) throw std::invalid_argument("fp8_gemm_v10_wgmma: needs sm_90a");
#endif
  if (g.k == 0) throw std::invalid_argument("fp8_gemm_v10_wgmma: k = 0 (nothing to multiply)");
  if (g.a_e5m2) {
    launch_v10<true, false>(g, stream);
  } else {
    launch_v10<false, false>(g, stream);
  }
}

}  // namespace mt::MT_KERNEL_NS
