#include "runtime/sim/warp_ops.h"

#include <cstring>

#include "runtime/error.h"
#include "runtime/sim/half.h"

namespace mt::simulator::warp_ops {

namespace {

bool in_mask(unsigned mask, unsigned lane) { return lane < 32 && ((mask >> lane) & 1u) != 0; }

void check_width(std::uint64_t width) {
  MT_CHECK(width >= 1 && width <= 32 && (width & (width - 1)) == 0,
           "warp shuffle: width must be a power of two in 1..32, got {}", width);
}

// Shared by the four shuffles: `source(lane)` names the lane to read, or -1
// when CUDA says the caller keeps its own value. Reading a lane outside the
// mask is undefined on the GPU; here it also returns the caller's own value.
template <typename SourceLane>
void shuffle(unsigned mask, const WarpLane* lanes, std::uint64_t width, SourceLane source) {
  check_width(width);
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!in_mask(mask, lane)) continue;
    const auto& input = *static_cast<const ShuffleInput*>(lanes[lane].input);
    const unsigned segment = lane & ~static_cast<unsigned>(width - 1);
    const int from = source(lane, segment, static_cast<unsigned>(width), input.lane_arg);
    const bool readable = from >= 0 && in_mask(mask, static_cast<unsigned>(from));
    const auto& source_input = readable ? *static_cast<const ShuffleInput*>(lanes[from].input) : input;
    *static_cast<std::uint64_t*>(lanes[lane].output) = source_input.bits;
  }
}

}  // namespace

void shuffle_index(unsigned mask, const WarpLane* lanes, std::uint64_t width) {
  shuffle(mask, lanes, width, [](unsigned, unsigned segment, unsigned w, int src) {
    return static_cast<int>(segment + (static_cast<unsigned>(src) % w));
  });
}

void shuffle_up(unsigned mask, const WarpLane* lanes, std::uint64_t width) {
  shuffle(mask, lanes, width, [](unsigned lane, unsigned segment, unsigned, int delta) {
    const int from = static_cast<int>(lane) - delta;
    return from < static_cast<int>(segment) ? -1 : from;
  });
}

void shuffle_down(unsigned mask, const WarpLane* lanes, std::uint64_t width) {
  shuffle(mask, lanes, width, [](unsigned lane, unsigned segment, unsigned w, int delta) {
    const unsigned from = lane + static_cast<unsigned>(delta);
    return from >= segment + w ? -1 : static_cast<int>(from);
  });
}

void shuffle_xor(unsigned mask, const WarpLane* lanes, std::uint64_t width) {
  // Lanes may read earlier segments but not later ones (CUDA's rule).
  shuffle(mask, lanes, width, [](unsigned lane, unsigned segment, unsigned w, int lane_mask) {
    const unsigned from = lane ^ static_cast<unsigned>(lane_mask);
    return from >= segment + w ? -1 : static_cast<int>(from);
  });
}

namespace {
unsigned predicate_bits(unsigned mask, const WarpLane* lanes) {
  unsigned bits = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (in_mask(mask, lane) && *static_cast<const int*>(lanes[lane].input) != 0) bits |= 1u << lane;
  }
  return bits;
}
void broadcast(unsigned mask, const WarpLane* lanes, unsigned value) {
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (in_mask(mask, lane)) *static_cast<unsigned*>(lanes[lane].output) = value;
  }
}
}  // namespace

void ballot(unsigned mask, const WarpLane* lanes, std::uint64_t) { broadcast(mask, lanes, predicate_bits(mask, lanes)); }
void vote_any(unsigned mask, const WarpLane* lanes, std::uint64_t) {
  broadcast(mask, lanes, predicate_bits(mask, lanes) != 0 ? 1u : 0u);
}
void vote_all(unsigned mask, const WarpLane* lanes, std::uint64_t) {
  broadcast(mask, lanes, predicate_bits(mask, lanes) == mask ? 1u : 0u);
}
void syncwarp(unsigned, const WarpLane*, std::uint64_t) {}

// ---- Tensor Core mma -------------------------------------------------------------
// Fragment layouts from the PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type". With group = lane / 4 and t = lane % 4:
//   A (16x16, row-major), registers a0..a3 hold elements a0..a7, two per register
//   (lower index in the low 16 bits):
//     row = group     for a0,a1,a4,a5;   group + 8 otherwise
//     col = 2t + (i&1) for a0..a3;        2t + (i&1) + 8 for a4..a7
//   B (16x8, "col"): registers b0,b1 hold b0..b3:
//     row = 2t + (i&1) for b0,b1;         2t + (i&1) + 8 for b2,b3;   col = group
//   C/D (16x8 f32): c0..c3:
//     row = group for c0,c1; group + 8 for c2,c3;   col = 2t + (i&1)

namespace {

struct MmaTile {
  float a[16][16];
  float b[16][8];
  float c[16][8];
};

int a_row(unsigned lane, int i) { return static_cast<int>(lane / 4) + ((i % 4) >= 2 ? 8 : 0); }
int a_col(unsigned lane, int i) { return static_cast<int>(lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
int b_row(unsigned lane, int i) { return static_cast<int>(lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
int b_col(unsigned lane, int) { return static_cast<int>(lane / 4); }
int c_row(unsigned lane, int i) { return static_cast<int>(lane / 4) + (i >= 2 ? 8 : 0); }
int c_col(unsigned lane, int i) { return static_cast<int>(lane % 4) * 2 + (i & 1); }

template <typename Element>
float element(const std::uint32_t* registers, int i) {
  const std::uint32_t reg = registers[i / 2];
  const auto bits = static_cast<std::uint16_t>((i & 1) != 0 ? reg >> 16 : reg & 0xffffu);
  return float(Element::from_bits(bits));
}

template <typename Element>
void mma_m16n8k16(unsigned mask, const WarpLane* lanes) {
  MT_CHECK(mask == 0xffffffffu, "mma.sync.aligned needs all 32 lanes of the warp, got mask 0x{:08x}", mask);
  MmaTile tile{};
  for (unsigned lane = 0; lane < 32; ++lane) {
    const auto& in = *static_cast<const MmaInput*>(lanes[lane].input);
    for (int i = 0; i < 8; ++i) tile.a[a_row(lane, i)][a_col(lane, i)] = element<Element>(in.a, i);
    for (int i = 0; i < 4; ++i) tile.b[b_row(lane, i)][b_col(lane, i)] = element<Element>(in.b, i);
    for (int i = 0; i < 4; ++i) tile.c[c_row(lane, i)][c_col(lane, i)] = in.c[i];
  }
  // Products of two 16-bit floats are exact in float; the sum is accumulated
  // in float (the Tensor Core's internal order differs, so results may differ
  // from the GPU in the last bits, never in layout).
  for (unsigned lane = 0; lane < 32; ++lane) {
    auto* d = static_cast<float*>(lanes[lane].output);
    for (int i = 0; i < 4; ++i) {
      const int row = c_row(lane, i);
      const int col = c_col(lane, i);
      float sum = tile.c[row][col];
      for (int k = 0; k < 16; ++k) sum += tile.a[row][k] * tile.b[k][col];
      d[i] = sum;
    }
  }
}

}  // namespace

void mma_m16n8k16_f16(unsigned mask, const WarpLane* lanes, std::uint64_t) { mma_m16n8k16<half>(mask, lanes); }

// PTX ISA, "Matrix Fragments for mma.m16n8k32" with .u8/.s8 multiplicands:
// the f16 layout above with four 8-bit elements per register (lowest byte
// first) where it had two halves. With group = lane / 4 and t = lane % 4:
//   A (16x32, row-major), a0..a15 in registers a[0..3]:
//     row = group for a[0] and a[2]; group + 8 for a[1] and a[3]
//     col = 4t + (i % 4) for a[0], a[1];  4t + (i % 4) + 16 for a[2], a[3]
//   B (32x8, "col"), b0..b7 in b[0..1]:
//     row = 4t + (i % 4) for b[0];  4t + (i % 4) + 16 for b[1];   col = group
//   C/D (16x8 s32): as for f16.
// The products and the sum are exact integers (s32 wraps past 2^31, as the
// hardware's does without .satfinite: no K mixtape runs gets near it).
void mma_m16n8k32_u8s8(unsigned mask, const WarpLane* lanes, std::uint64_t) {
  MT_CHECK(mask == 0xffffffffu, "mma.sync.aligned needs all 32 lanes of the warp, got mask 0x{:08x}", mask);
  std::int32_t a[16][32], b[32][8], c[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const auto& in = *static_cast<const MmaInt8Input*>(lanes[lane].input);
    const int group = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
    for (int r = 0; r < 4; ++r) {
      for (int byte = 0; byte < 4; ++byte) {
        const int row = group + ((r & 1) != 0 ? 8 : 0), col = 4 * t + byte + (r >= 2 ? 16 : 0);
        a[row][col] = static_cast<std::int32_t>(static_cast<std::uint8_t>(in.a[r] >> (8 * byte)));
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int byte = 0; byte < 4; ++byte) {
        b[4 * t + byte + (r == 1 ? 16 : 0)][group] =
            static_cast<std::int32_t>(static_cast<std::int8_t>(static_cast<std::uint8_t>(in.b[r] >> (8 * byte))));
      }
    }
    for (int i = 0; i < 4; ++i) c[c_row(lane, i)][c_col(lane, i)] = in.c[i];
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    auto* d = static_cast<std::int32_t*>(lanes[lane].output);
    for (int i = 0; i < 4; ++i) {
      const int row = c_row(lane, i), col = c_col(lane, i);
      std::uint32_t sum = static_cast<std::uint32_t>(c[row][col]);  // unsigned: wrap-around is defined
      for (int k = 0; k < 32; ++k) sum += static_cast<std::uint32_t>(a[row][k] * b[k][col]);
      d[i] = static_cast<std::int32_t>(sum);
    }
  }
}
void mma_m16n8k16_bf16(unsigned mask, const WarpLane* lanes, std::uint64_t) { mma_m16n8k16<bfloat16>(mask, lanes); }

// ---- ldmatrix -----------------------------------------------------------------------
// PTX ISA, ldmatrix: lanes 8m..8m+7 give the row addresses of matrix m (16
// bytes = eight b16 each, 16-byte aligned). In register m, lane l receives row
// l/4, elements 2(l%4) and 2(l%4)+1 (low half first). With .trans the matrix
// is read column-major: lane l receives rows 2(l%4) and 2(l%4)+1 of column l/4.
void ldmatrix(unsigned mask, const WarpLane* lanes, std::uint64_t op_arg) {
  const unsigned matrices = static_cast<unsigned>(op_arg & 0xffu);
  const bool trans = (op_arg >> 8) != 0;
  MT_CHECK(mask == 0xffffffffu, "ldmatrix.sync.aligned needs all 32 lanes of the warp, got mask 0x{:08x}", mask);
  std::uint16_t tile[4][8][8];
  for (unsigned m = 0; m < matrices; ++m) {
    for (unsigned row = 0; row < 8; ++row) {
      const void* address = lanes[m * 8 + row].input;
      MT_CHECK(reinterpret_cast<std::uintptr_t>(address) % 16 == 0,
               "ldmatrix: lane {} gave row address {}, which is not 16-byte aligned", m * 8 + row, address);
      std::memcpy(tile[m][row], address, 16);
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    auto* out = static_cast<std::uint32_t*>(lanes[lane].output);
    const unsigned r = lane / 4;
    const unsigned c = 2 * (lane % 4);
    for (unsigned m = 0; m < matrices; ++m) {
      const std::uint16_t low = trans ? tile[m][c][r] : tile[m][r][c];
      const std::uint16_t high = trans ? tile[m][c + 1][r] : tile[m][r][c + 1];
      out[m] = static_cast<std::uint32_t>(low) | (static_cast<std::uint32_t>(high) << 16);
    }
  }
}

}  // namespace mt::simulator::warp_ops
