// The copies between NCHW and oneDNN's channel-blocked layouts
// (kernels/common/channel_blocks.h) against the layouts' index formula:
// every element size and block the copies take, planes shorter than, equal
// to and between whole tiles. The convolutions that use them are checked
// against f64 in test_cpu_conv.cpp.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/channel_blocks.h"

using mt::kernels::cpu::channel_blocks_supported;
using mt::kernels::cpu::channel_blocks_to_plain;
using mt::kernels::cpu::ChannelBlocks;
using mt::kernels::cpu::plain_to_channel_blocks;

namespace {

// Element i of the plain tensor as distinct bytes (element sizes 2 and 4).
template <typename T>
std::vector<T> distinct_values(int64_t n) {
  std::vector<T> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<T>(0x9e37 * (i + 1) ^ (i << 3));
  return values;
}

// The blocked layout by its definition: [batch, channels / block, plane, block].
template <typename T>
std::vector<T> blocked_by_formula(const ChannelBlocks& g, const std::vector<T>& plain) {
  std::vector<T> blocked(plain.size());
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t c = 0; c < g.channels; ++c) {
      for (int64_t p = 0; p < g.plane; ++p) {
        const int64_t to = ((n * (g.channels / g.block) + c / g.block) * g.plane + p) * g.block + c % g.block;
        blocked[static_cast<size_t>(to)] = plain[static_cast<size_t>((n * g.channels + c) * g.plane + p)];
      }
    }
  }
  return blocked;
}

template <typename T>
void check_both_ways(const ChannelBlocks& g) {
  const std::vector<T> plain = distinct_values<T>(g.batch * g.channels * g.plane);
  std::vector<T> blocked(plain.size()), back(plain.size());
  plain_to_channel_blocks(g, plain.data(), blocked.data());
  CHECK(blocked == blocked_by_formula(g, plain));
  channel_blocks_to_plain(g, blocked.data(), back.data());
  CHECK(back == plain);
}

}  // namespace

// A tile's rows and columns swapped, a wrong lane shuffle in one of the
// three AVX2 transposes, or the positions after the last whole tile skipped
// or misplaced, each breaks the formula here.
TEST_CASE("channel blocks: NCHW to nChw16c / nChw8c and back follow the layout's formula, tails included",
          "[kernels][cpu][onednn]") {
  for (const int64_t block : {8, 16}) {
    for (const int64_t plane : {1, 7, 8, 9, 15, 16, 17, 36, 49, 196}) {
      for (const int64_t element_bytes : {2, 4}) {
        const ChannelBlocks g{3, 2 * block, plane, block, element_bytes};
        INFO("block " << block << ", plane " << plane << ", " << element_bytes << "-byte elements");
        REQUIRE(channel_blocks_supported(g));
        if (element_bytes == 2) {
          check_both_ways<uint16_t>(g);
        } else {
          check_both_ways<uint32_t>(g);
        }
      }
    }
  }
}

// A padded last block must be zero-filled, which these copies do not do:
// oneDNN's reorder has to get those cases.
TEST_CASE("channel blocks: channels not a whole number of blocks, other blocks and element sizes are not taken",
          "[kernels][cpu][onednn]") {
  CHECK_FALSE(channel_blocks_supported({2, 24, 49, 16, 2}));
  CHECK_FALSE(channel_blocks_supported({2, 12, 49, 8, 4}));
  CHECK_FALSE(channel_blocks_supported({2, 32, 49, 4, 4}));
  CHECK_FALSE(channel_blocks_supported({2, 32, 49, 16, 1}));
  CHECK_FALSE(channel_blocks_supported({2, 32, 49, 16, 8}));
  CHECK(channel_blocks_supported({2, 48, 49, 16, 2}));
}
