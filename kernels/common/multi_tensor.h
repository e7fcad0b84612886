// multi_tensor_apply, after Apex: one launch works on a whole list of tensors.
//
// A training step touches hundreds of parameter/gradient tensors, most of
// them small. One launch per tensor would spend more time launching than
// computing, so the tensors are cut into chunks of kMultiTensorChunk
// elements, and one launch covers up to MaxBlocks chunks of up to MaxTensors
// tensors: block b works on chunk table.block_chunk[b] of tensor
// table.block_tensor[b]. The pointer table travels in the kernel argument
// (a struct by value, under CUDA's 4 KiB parameter limit), so no host-to-
// device copy of the table is needed. Longer lists take a few launches.
//
// Include after runtime/launch.h, from .cu files only.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/multi_tensor_api.h"

namespace mt::MT_KERNEL_NS {

inline constexpr int kMultiTensorThreads = 512;

template <int MaxTensors, int MaxBlocks>
struct ChunkTable {
  static constexpr int kMaxTensors = MaxTensors;
  static constexpr int kMaxBlocks = MaxBlocks;
  std::int32_t num_blocks = 0;
  std::uint8_t block_tensor[MaxBlocks] = {};  // slot in this launch's tensor list
  std::int32_t block_chunk[MaxBlocks] = {};
};

// Plans the launches over tensors with `numels`: calls
// launch_fn(global tensor indices of this launch's slots, chunk table).
// A tensor whose chunks do not fit is continued in the next launch.
template <int MaxTensors, int MaxBlocks, typename LaunchFn>
void for_each_multi_tensor_launch(const std::vector<std::int64_t>& numels, LaunchFn&& launch_fn) {
  static_assert(MaxTensors <= 256, "block_tensor is a byte");
  ChunkTable<MaxTensors, MaxBlocks> table;
  std::vector<int> tensors;
  auto flush = [&] {
    if (table.num_blocks > 0) launch_fn(tensors, table);
    table = {};
    tensors.clear();
  };
  for (int t = 0; t < static_cast<int>(numels.size()); ++t) {
    const std::int64_t chunks = (numels[static_cast<size_t>(t)] + kernels::kMultiTensorChunk - 1) /
                                kernels::kMultiTensorChunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      if (tensors.empty() || tensors.back() != t) {
        if (static_cast<int>(tensors.size()) == MaxTensors) flush();
        tensors.push_back(t);
      }
      table.block_tensor[table.num_blocks] = static_cast<std::uint8_t>(tensors.size() - 1);
      table.block_chunk[table.num_blocks] = static_cast<std::int32_t>(c);
      if (++table.num_blocks == MaxBlocks) flush();
    }
  }
  flush();
}

// The element range [begin, end) of this block's chunk in a tensor of `numel` elements.
__device__ __forceinline__ void chunk_range(std::int32_t chunk, std::int64_t numel, std::int64_t& begin,
                                            std::int64_t& end) {
  begin = static_cast<std::int64_t>(chunk) * kernels::kMultiTensorChunk;
  end = begin + kernels::kMultiTensorChunk < numel ? begin + kernels::kMultiTensorChunk : numel;
}

// A list of plain tensors (any float dtype each) for one launch.
inline constexpr int kFlatTensors = 48;
inline constexpr int kFlatBlocks = 192;
struct FlatTensorTable {
  void* data[kFlatTensors] = {};
  std::int64_t numel[kFlatTensors] = {};
  DType dtype[kFlatTensors] = {};
  std::int32_t index[kFlatTensors] = {};  // each slot's position in the caller's list
  ChunkTable<kFlatTensors, kFlatBlocks> chunks;
};

// Calls fn(table, index of the launch's first block among all launches).
template <typename Fn>
void for_each_flat_launch(const kernels::TensorRef* tensors, int count, Fn&& fn) {
  std::vector<std::int64_t> numels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) numels[static_cast<size_t>(i)] = tensors[i].numel;
  std::int64_t block_base = 0;
  for_each_multi_tensor_launch<kFlatTensors, kFlatBlocks>(numels, [&](const std::vector<int>& ids, const auto& chunks) {
    FlatTensorTable table;
    for (size_t k = 0; k < ids.size(); ++k) {
      const kernels::TensorRef& t = tensors[ids[k]];
      table.data[k] = t.data;
      table.numel[k] = t.numel;
      table.dtype[k] = t.dtype;
      table.index[k] = ids[k];
    }
    table.chunks = chunks;
    fn(table, block_base);
    block_base += chunks.num_blocks;
  });
}

}  // namespace mt::MT_KERNEL_NS
