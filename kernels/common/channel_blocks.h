// Copies between PyTorch's NCHW layout and the channel-blocked layout
// oneDNN's convolutions choose for their activations (nChw16c on AVX-512,
// nChw8c on AVX2): for each sample, the channels in blocks of `block`, each
// block stored position by position with its `block` channels side by side.
//
//   plain   [batch, channels, plane]            (plane = H * W)
//   blocked [batch, channels / block, plane, block]
//
// Moving a block between the two is a transpose of a [block, plane] matrix,
// done here in square tiles held in AVX2 registers (16 x 16 for 2-byte
// elements, 8 x 8 for 4-byte ones), the rest of each plane element by
// element.
//
// Why not oneDNN's own reorder (kernels/common/onednn.cpp used it for
// these): on the project VM (AMD EPYC, 2 threads) its jit:uni reorder of a
// bf16 [128, 32, 28, 28] activation took 0.52-0.59 ms each way where a
// memcpy of the same 6.4 MB took 0.09, and resnet's bf16 training step
// spent 26 ms of about 220 in such reorders (ONEDNN_VERBOSE, 12 steps).
// The tiles below do that copy in 0.15 (to blocks) and 0.20 ms (back).
//
// Whole blocks only (channels % block == 0): a padded last block, whose
// padding must be zeroed, is left to oneDNN. A copy, so any thread count
// gives the same bytes.
#pragma once

#include <cstdint>

namespace mt::kernels::cpu {

struct ChannelBlocks {
  int64_t batch = 0, channels = 0, plane = 0;
  int64_t block = 0;          // 8 or 16 channels
  int64_t element_bytes = 0;  // 2 (bf16, f16) or 4 (f32)
};

// Whether the copies below take `shape`: element size 2 or 4, block 8 or 16,
// whole blocks.
bool channel_blocks_supported(const ChannelBlocks& shape);

void plain_to_channel_blocks(const ChannelBlocks& shape, const void* plain, void* blocked);
void channel_blocks_to_plain(const ChannelBlocks& shape, const void* blocked, void* plain);

}  // namespace mt::kernels::cpu
