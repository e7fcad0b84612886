// What v6 and v7 share (private to kernels/gemm/ladder): TMA boxes of A and B
// in 128-byte-swizzled shared memory, the wgmma matrix descriptors that read
// them, the tensor maps, and the accumulator epilogue.
//
// A K slice of one operand is 64 k deep and Rows (m or n) wide. How it sits
// in shared memory depends on which of its dimensions is contiguous in
// global memory:
//   K-major (A row-major, B stored N x K): one box {64 k, Rows}: Rows rows of
//     64 k = 128 bytes, one swizzle row each.
//   M/N-major (A stored K x M, B row-major K x N): Rows / 64 boxes {64 m|n,
//     64 k}: each 64 rows (one per k) of 64 m|n = 128 bytes; boxes 8 KB apart.
// Either way 64 rows of m (a wgmma's M) start 4096 elements apart, and the
// 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)) is what
// TMA writes and what the descriptors tell wgmma to read.
#pragma once

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "kernels/common/ptx_hopper.h"
#include "kernels/common/tensor_map.h"
#include "kernels/gemm/ladder/gemm_common.h"

namespace mt::MT_KERNEL_NS::hopper {

using std::uint16_t;
using std::uint64_t;

constexpr int kBlockK = 64;                 // one 128-byte swizzle row of f16/bf16
constexpr int kBoxElements = 64 * kBlockK;  // 64 rows: one wgmma's M, one M/N-major box
constexpr unsigned kSwizzleRowBytes = 128, kSwizzleAtomBytes = 8 * kSwizzleRowBytes;

template <typename E>
constexpr bool kIsBf16 = std::is_same_v<E, element::BF16>;

// Aligns the dynamic shared memory to the swizzle's 1024-byte period.
__device__ __forceinline__ uint16_t* aligned_tiles(unsigned char* raw) {
  return reinterpret_cast<uint16_t*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t{1023});
}

__device__ __forceinline__ void copy_box(uint16_t* dst, const kernels::TensorMap* map, int inner, int outer, int batch,
                                         bool batched, uint64_t* barrier) {
  if (batched) {
    ptx::tensor_copy_3d(dst, map, inner, outer, batch, barrier);
  } else {
    ptx::tensor_copy_2d(dst, map, inner, outer, barrier);
  }
}

// One thread: TMA boxes of the slice at k0 of rows row0.. into `tile`.
template <bool KMajor, int Rows>
__device__ __forceinline__ void load_operand(uint16_t* tile, const kernels::TensorMap* map, int row0, int k0, int batch,
                                             bool batched, uint64_t* barrier) {
  if constexpr (KMajor) {
    copy_box(tile, map, k0, row0, batch, batched, barrier);
  } else {
    MT_UNROLL
    for (int box = 0; box < Rows / 64; ++box) {
      copy_box(tile + box * kBoxElements, map, row0 + box * 64, k0, batch, batched, barrier);
    }
  }
}

// load_operand, multicast: the boxes land at the same offset in every block
// of the cluster named in `cta_mask`, each completing on its own `barrier`.
template <bool KMajor, int Rows>
__device__ __forceinline__ void load_operand_multicast(uint16_t* tile, const kernels::TensorMap* map, int row0, int k0,
                                                       int batch, bool batched, uint64_t* barrier,
                                                       std::uint16_t cta_mask) {
  auto copy = [&](uint16_t* dst, int inner, int outer) {
    if (batched) {
      ptx::tensor_copy_3d_multicast(dst, map, inner, outer, batch, barrier, cta_mask);
    } else {
      ptx::tensor_copy_2d_multicast(dst, map, inner, outer, barrier, cta_mask);
    }
  };
  if constexpr (KMajor) {
    copy(tile, k0, row0);
  } else {
    MT_UNROLL
    for (int box = 0; box < Rows / 64; ++box) copy(tile + box * kBoxElements, row0 + box * 64, k0);
  }
}

// The descriptor of k16 step `kk` of a tile (from its first row). K-major:
// 8-row groups 1024 bytes apart (SBO), the step moves 32 bytes along the
// 128-byte rows; LBO is unused with a swizzle (16 by convention). M/N-major:
// the step moves 16 k-rows, 8-row groups 1024 apart (SBO), the next 64 m|n
// (the next box) 8 KB on (LBO).
template <bool KMajor>
__device__ __forceinline__ uint64_t operand_descriptor(const uint16_t* tile, int kk) {
  if constexpr (KMajor) {
    return ptx::matrix_descriptor(tile + kk * 16, 16, kSwizzleAtomBytes, ptx::Swizzle::B128);
  } else {
    return ptx::matrix_descriptor(tile + kk * 16 * 64, kBoxElements * sizeof(uint16_t), kSwizzleAtomBytes,
                                  ptx::Swizzle::B128);
  }
}

// One warpgroup's m64nN accumulators -> C rows row0..row0+63, columns col0..
// (fragment in ptx_hopper.h; warp w of the warpgroup holds rows 16w..16w+15).
template <typename E, int N>
__device__ __forceinline__ void store_fragment(const kernels::GemmArgs& args, int batch, int row0, int col0,
                                               const float (&acc)[N / 2]) {
  const int warp = static_cast<int>((threadIdx.x % 128) / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int row = row0 + warp * 16 + lane / 4;
  MT_UNROLL
  for (int i = 0; i < N / 8; ++i) {
    const int col = col0 + 8 * i + 2 * (lane % 4);
    gemm_detail::store_output<E>(args, batch, row, col, acc[4 * i + 0]);
    gemm_detail::store_output<E>(args, batch, row, col + 1, acc[4 * i + 1]);
    gemm_detail::store_output<E>(args, batch, row + 8, col, acc[4 * i + 2]);
    gemm_detail::store_output<E>(args, batch, row + 8, col + 1, acc[4 * i + 3]);
  }
}

// ---- host ------------------------------------------------------------------------------

#if !MT_SIM_BUILD
// The current device's compute capability (major) and SM count, read once
// per device: production GEMMs ask on every call.
struct DeviceFacts {
  int major = 0, sms = 0;
};
inline DeviceFacts current_device_facts() {
  static std::mutex mutex;
  static std::unordered_map<int, DeviceFacts> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return {};
  const std::lock_guard lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    DeviceFacts facts;
    if (cudaDeviceGetAttribute(&facts.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&facts.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return {};
    }
    it = known.emplace(device, facts).first;
  }
  return it->second;
}
#endif

// The tensor map of an operand stored row-major as rows x cols (ld, batch
// stride) whose boxes are 64 columns by box_rows rows (128-byte swizzle).
inline kernels::TensorMap operand_map(const kernels::GemmArgs& args, const void* base, int rows, int cols, int64_t ld,
                                      int64_t batch_stride, int box_rows) {
  kernels::TensorMapSpec spec;
  spec.dtype = args.dtype;
  spec.address = base;
  spec.rank = args.batch > 1 ? 3 : 2;
  spec.dims[0] = static_cast<uint64_t>(cols);
  spec.dims[1] = static_cast<uint64_t>(rows);
  spec.dims[2] = static_cast<uint64_t>(args.batch);
  spec.strides[1] = static_cast<uint64_t>(ld);
  spec.strides[2] = args.batch > 1 ? static_cast<uint64_t>(batch_stride) : 0;
  spec.box[0] = 64;
  spec.box[1] = static_cast<std::uint32_t>(box_rows);
  spec.swizzle_bytes = kSwizzleRowBytes;
  kernels::TensorMap map{};
  encode_tensor_map(map, spec);
  return map;
}

// A's and B's maps for a block tile of BlockM x BlockN.
struct OperandMaps {
  kernels::TensorMap a, b;
};
template <int BlockM, int BlockN>
OperandMaps operand_maps(const kernels::GemmArgs& args) {
  const bool ta = args.trans_a, tb = args.trans_b;
  return {operand_map(args, args.a, ta ? args.k : args.m, ta ? args.m : args.k, args.lda, args.batch_stride_a,
                      ta ? 64 : BlockM),
          operand_map(args, args.b, tb ? args.n : args.k, tb ? args.k : args.n, args.ldb, args.batch_stride_b,
                      tb ? BlockN : 64)};
}

// Can TMA (and wgmma) take these operands here? f16/bf16, 16-byte aligned,
// leading dimensions and batch strides multiples of 8 elements, and on a GPU
// an sm_90 device (wgmma is sm_90a; this build has no other Hopper target).
inline bool supports(const kernels::GemmArgs& args) {
  if (args.dtype != kernels::KernelDType::F16 && args.dtype != kernels::KernelDType::BF16) return false;
  auto tma_ok = [&](const void* base, int64_t ld, int64_t batch_stride) {
    return reinterpret_cast<std::uintptr_t>(base) % 16 == 0 && ld % 8 == 0 &&
           (args.batch <= 1 || batch_stride % 8 == 0);
  };
  if (!tma_ok(args.a, args.lda, args.batch_stride_a) || !tma_ok(args.b, args.ldb, args.batch_stride_b)) return false;
#if !MT_SIM_BUILD
  if (current_device_facts().major != 9) return false;
#endif
  return true;
}

// Host entry shared by v6 and v7: checks, the k = 0 epilogue, then
// Launch<E, TransA, TransB>::run(args, stream) for the dtype and layout.
template <template <typename, bool, bool> class Launch>
void run(const char* name, const kernels::GemmArgs& args, kernels::Stream stream) {
  gemm_detail::check_args(args, name);
  if (!supports(args)) {
    throw std::invalid_argument(std::string(name) +
                                ": needs f16/bf16 operands TMA can read (16-byte aligned, leading dimensions and batch "
                                "strides multiples of 8) and, on a GPU, an sm_90 device");
  }
  auto go = [&](auto tag) {
    using E = decltype(tag);
    if (gemm_detail::handle_degenerate<E>(args, stream)) return;
    if (!args.trans_a && !args.trans_b) Launch<E, false, false>::run(args, stream);
    if (!args.trans_a && args.trans_b) Launch<E, false, true>::run(args, stream);
    if (args.trans_a && !args.trans_b) Launch<E, true, false>::run(args, stream);
    if (args.trans_a && args.trans_b) Launch<E, true, true>::run(args, stream);
  };
  if (args.dtype == kernels::KernelDType::F16) {
    go(element::F16{});
  } else {
    go(element::BF16{});
  }
}

}  // namespace mt::MT_KERNEL_NS::hopper
