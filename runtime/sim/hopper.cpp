#include "runtime/sim/hopper.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/sim/half.h"

namespace mt::simulator::hopper {

std::uintptr_t swizzle(std::uintptr_t address, unsigned swizzle_bytes) {
  if (swizzle_bytes == 0) return address;
  const unsigned row_bits = static_cast<unsigned>(std::countr_zero(swizzle_bytes / 16u));  // 1, 2 or 3
  const std::uintptr_t row = (address >> 7) & ((std::uintptr_t{1} << row_bits) - 1);
  return address ^ (row << 4);
}

// ---- tensor maps ------------------------------------------------------------------

void check_tensor_map(const TensorMapEncoding& e) {
  MT_CHECK(e.rank >= 1 && e.rank <= 3, "tensor map: rank {} (the simulator takes 1..3)", e.rank);
  MT_CHECK(e.element_bytes == 1 || e.element_bytes == 2 || e.element_bytes == 4 || e.element_bytes == 8,
           "tensor map: element size {} bytes", e.element_bytes);
  MT_CHECK(reinterpret_cast<std::uintptr_t>(e.global_address) % 16 == 0,
           "tensor map: the global address {} is not 16-byte aligned", e.global_address);
  MT_CHECK(e.strides[0] == e.element_bytes, "tensor map: the innermost dimension must be contiguous");
  for (std::uint32_t d = 0; d < e.rank; ++d) {
    MT_CHECK(e.dims[d] >= 1 && e.dims[d] <= (std::uint64_t{1} << 32), "tensor map: dimension {} has {} elements", d,
             e.dims[d]);
    MT_CHECK(e.box[d] >= 1 && e.box[d] <= 256, "tensor map: box dimension {} is {} (1..256)", d, e.box[d]);
    if (d > 0) {
      MT_CHECK(e.strides[d] % 16 == 0 && e.strides[d] < (std::uint64_t{1} << 40),
               "tensor map: the stride of dimension {} is {} bytes (a multiple of 16 below 2^40)", d, e.strides[d]);
    }
  }
  for (std::uint32_t d = e.rank; d < 3; ++d) {
    MT_CHECK(e.dims[d] == 1 && e.box[d] == 1, "tensor map: dimension {} lies beyond rank {}", d, e.rank);
  }
  const std::uint64_t row_bytes = std::uint64_t{e.box[0]} * e.element_bytes;
  MT_CHECK(row_bytes % 16 == 0, "tensor map: the box's inner dimension is {} bytes (a multiple of 16)", row_bytes);
  MT_CHECK(e.swizzle_bytes == 0 || e.swizzle_bytes == 32 || e.swizzle_bytes == 64 || e.swizzle_bytes == 128,
           "tensor map: swizzle of {} bytes (0, 32, 64 or 128)", e.swizzle_bytes);
  // The hardware allows an inner box narrower than the swizzle span; how it
  // then lays rows out is not simulated, so the simulator asks for equality.
  MT_CHECK(e.swizzle_bytes == 0 || row_bytes == e.swizzle_bytes,
           "tensor map: with a {}-byte swizzle the simulator needs the box's inner dimension to be {} bytes, not {}",
           e.swizzle_bytes, e.swizzle_bytes, row_bytes);
}

TensorMapEncoding read_tensor_map(const void* map) {
  MT_CHECK(map != nullptr, "cp.async.bulk.tensor: null tensor map");
  TensorMapEncoding e;
  std::memcpy(&e, map, sizeof(e));
  MT_CHECK(e.magic == TensorMapEncoding::kMagic, "cp.async.bulk.tensor: the tensor map at {} was never encoded", map);
  return e;
}

std::uint32_t box_bytes(const TensorMapEncoding& map) {
  return map.box[0] * map.box[1] * map.box[2] * map.element_bytes;
}

void land_tensor_tile(std::byte* shared_dst, const TensorMapEncoding& map, const std::int32_t (&coords)[3]) {
  const auto* global = static_cast<const std::byte*>(map.global_address);
  std::uint64_t offset = 0;
  for (std::uint32_t i2 = 0; i2 < map.box[2]; ++i2) {
    for (std::uint32_t i1 = 0; i1 < map.box[1]; ++i1) {
      for (std::uint32_t i0 = 0; i0 < map.box[0]; ++i0, offset += map.element_bytes) {
        const std::int64_t at[3] = {std::int64_t{coords[0]} + i0, std::int64_t{coords[1]} + i1,
                                    std::int64_t{coords[2]} + i2};
        bool inside = true;
        std::uint64_t source = 0;
        for (int d = 0; d < 3; ++d) {
          inside = inside && at[d] >= 0 && static_cast<std::uint64_t>(at[d]) < map.dims[d];
          source += static_cast<std::uint64_t>(at[d]) * map.strides[d];
        }
        auto* dst = reinterpret_cast<std::byte*>(
            swizzle(reinterpret_cast<std::uintptr_t>(shared_dst + offset), map.swizzle_bytes));
        if (inside) {
          std::memcpy(dst, global + source, map.element_bytes);
        } else {
          std::memset(dst, 0, map.element_bytes);  // out of bounds reads as zero (OOB fill NONE)
        }
      }
    }
  }
}

// ---- wgmma ------------------------------------------------------------------------

namespace {

// PTX ISA, "Matrix Descriptor Format": start address, leading and stride
// byte offsets (all >> 4, 14 bits each), base offset, swizzle mode.
struct MatrixDescriptor {
  std::uint32_t start, leading, stride;
  unsigned swizzle_bytes;
};

MatrixDescriptor decode(std::uint64_t desc) {
  const unsigned base_offset = static_cast<unsigned>((desc >> 49) & 7u);
  MT_CHECK(base_offset == 0, "wgmma: matrix base offset {} (only 0, the canonical layouts, is simulated)", base_offset);
  static constexpr unsigned kSwizzle[4] = {0, 128, 64, 32};
  return {static_cast<std::uint32_t>(desc & 0x3fffu) << 4, static_cast<std::uint32_t>((desc >> 16) & 0x3fffu) << 4,
          static_cast<std::uint32_t>((desc >> 32) & 0x3fffu) << 4, kSwizzle[(desc >> 62) & 3u]};
}

// Byte offset (before the swizzle) of element (mn, k) of an operand
// in one of wgmma's canonical layouts (PTX ISA "Shared Memory Matrix Layout";
// CUTLASS writes the same as cute layouts in 16-byte units). W is the number
// of 16-byte chunks in a swizzle row (2, 4, 8); without swizzle the core
// matrices are 8 x 16 bytes and both offsets are free.
//   K-major:  row mn at (mn % 8) * 16W + (mn / 8) * SBO; k in 16-byte halves (k / 8) * 16 (LBO without swizzle)
//   MN-major: 8 mn per chunk, (mn / 8) % W chunks, mn / 8W at LBO; k rows at (k % 8) * 16W + (k / 8) * SBO
//             (without swizzle: mn / 8 at SBO, k % 8 rows of 16 bytes, k / 8 at LBO)
// An 8-bit (FP8) operand is K-major only, and its layout is the 16-bit one
// read in bytes: a 16-byte chunk holds 16 elements of K instead of 8.
std::uint32_t element_offset(const MatrixDescriptor& d, unsigned mn, unsigned k, bool mn_major, unsigned bytes) {
  const unsigned w = d.swizzle_bytes / 16;
  if (!mn_major) {
    const unsigned kb = k * bytes;  // K position in bytes
    if (w == 0) return d.start + (mn % 8) * 16 + (mn / 8) * d.stride + (kb / 16) * d.leading + kb % 16;
    return d.start + (mn % 8) * 16 * w + (mn / 8) * d.stride + kb;
  }
  if (w == 0) return d.start + (mn % 8) * 2 + (mn / 8) * d.stride + (k % 8) * 16 + (k / 8) * d.leading;
  return d.start + (mn % 8) * 2 + ((mn / 8) % w) * 16 + (mn / (8 * w)) * d.leading + (k % 8) * 16 * w +
         (k / 8) * d.stride;
}

bool is_fp8(WgmmaType t) { return t == WgmmaType::E4M3 || t == WgmmaType::E5M2; }
unsigned element_bytes(WgmmaType t) { return is_fp8(t) ? 1 : 2; }
// K of one instruction: 32 bytes of each row of A and B.
unsigned instruction_k(const WgmmaIssue& issue) { return is_fp8(issue.a_type) ? 32 : 16; }

float operand_value(WgmmaType t, std::uint16_t bits) {
  switch (t) {
    case WgmmaType::F16: return half_bits_to_float(bits);
    case WgmmaType::BF16: return bfloat16_bits_to_float(bits);
    case WgmmaType::E4M3: return e4m3_bits_to_f32(static_cast<std::uint8_t>(bits));
    case WgmmaType::E5M2: return e5m2_bits_to_f32(static_cast<std::uint8_t>(bits));
  }
  return 0;
}

std::uint16_t operand_bits(const QueuedWgmma& op, const MatrixDescriptor& d, unsigned mn, unsigned k, bool mn_major,
                           WgmmaType type) {
  const unsigned bytes = element_bytes(type);
  const std::uint32_t offset = element_offset(d, mn, k, mn_major, bytes);
  MT_CHECK(offset + bytes <= op.shared_bytes,
           "wgmma: element ({}, {}) of an operand lies at shared offset {}, beyond the {} bytes of dynamic shared "
           "memory (the simulator takes wgmma operands from dynamic shared memory only)",
           mn, k, offset, op.shared_bytes);
  const auto address = swizzle(reinterpret_cast<std::uintptr_t>(op.shared_base + offset), d.swizzle_bytes);
  std::uint16_t bits = 0;
  std::memcpy(&bits, reinterpret_cast<const void*>(address), bytes);  // little-endian: a byte lands low
  return bits;
}

// Calls visit(is_a, mn, k, bits) for every operand element the warp reads:
// its 16 rows of A, all N columns of B.
template <typename Visit>
void for_each_operand(const QueuedWgmma& op, Visit&& visit) {
  const MatrixDescriptor a = decode(op.issue.desc_a);
  const MatrixDescriptor b = decode(op.issue.desc_b);
  const unsigned kk = instruction_k(op.issue);
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned k = 0; k < kk; ++k)
      visit(true, r, k, operand_bits(op, a, 16 * op.warp_rank + r, k, op.issue.trans_a, op.issue.a_type));
  }
  for (unsigned n = 0; n < op.issue.n; ++n) {
    for (unsigned k = 0; k < kk; ++k)
      visit(false, n, k, operand_bits(op, b, n, k, op.issue.trans_b, op.issue.b_type));
  }
}

bool same_instruction(const WgmmaIssue& a, const WgmmaIssue& b) {
  return a.n == b.n && a.desc_a == b.desc_a && a.desc_b == b.desc_b && a.accumulate == b.accumulate &&
         a.trans_a == b.trans_a && a.trans_b == b.trans_b && a.a_type == b.a_type && a.b_type == b.b_type;
}

// The FP8 accumulation model (runtime.h): `value` truncated to `bits`
// significand bits, toward zero.
float narrow_accumulator(float value, int bits) {
  if (bits <= 0 || bits >= 24 || !std::isfinite(value)) return value;
  const std::uint32_t mask = ~((std::uint32_t{1} << (24 - bits)) - 1u);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(value) & mask);
}

// One m64nNk16 for one warp: its rows 16w..16w+15. Accumulator fragment
// (PTX ISA, "wgmma .m64nNk16 register fragment D"), group = lane / 4,
// t = lane % 4, for each 8-column slice i < N / 8:
//   d[4i + 0..1] = D[16w + group][8i + 2t .. +1]
//   d[4i + 2..3] = D[16w + group + 8][8i + 2t .. +1]
void multiply_for_warp(const QueuedWgmma* const (&lanes)[32]) {
  const QueuedWgmma& op = *lanes[0];
  MT_CHECK(operand_checksum(op) == op.issued_checksum,
           "wgmma (warp {} of its warpgroup): the shared memory it multiplies changed between wgmma.mma_async and "
           "the wait_group that retired it (a copy still landing when it was issued, or a tile overwritten before "
           "the wait): the kernel races with its own Tensor Core reads",
           op.warp_rank);
  float a_rows[16][32], b_cols[256][32];
  for_each_operand(op, [&](bool is_a, unsigned mn, unsigned k, std::uint16_t bits) {
    if (is_a) {
      a_rows[mn][k] = operand_value(op.issue.a_type, bits);
    } else {
      b_cols[mn][k] = operand_value(op.issue.b_type, bits);
    }
  });
  const unsigned kk = instruction_k(op.issue);
  const int narrow_bits = is_fp8(op.issue.a_type) ? fp8_accumulator_bits() : 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    float* d = lanes[lane]->issue.d;
    const unsigned group = lane / 4, t = lane % 4;
    for (unsigned i = 0; i < op.issue.n / 8; ++i) {
      for (unsigned r = 0; r < 4; ++r) {
        const unsigned row = group + (r >= 2 ? 8 : 0);
        const unsigned col = 8 * i + 2 * t + (r & 1u);
        float sum = op.issue.accumulate ? d[4 * i + r] : 0.0f;
        for (unsigned k = 0; k < kk; ++k) sum += a_rows[row][k] * b_cols[col][k];
        d[4 * i + r] = narrow_accumulator(sum, narrow_bits);
      }
    }
  }
}

}  // namespace

std::uint64_t operand_checksum(const QueuedWgmma& op) {
  std::uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the element bits
  for_each_operand(op, [&](bool, unsigned, unsigned, std::uint16_t bits) { hash = (hash ^ bits) * 0x100000001b3ull; });
  return hash;
}

void wgmma_retire(unsigned mask, const WarpLane* lanes, std::uint64_t groups_left) {
  MT_CHECK(mask == 0xffffffffu, "wgmma.wait_group.sync.aligned needs all 32 lanes of the warp, got mask 0x{:08x}",
           mask);
  WgmmaQueue* queues[32];
  for (unsigned lane = 0; lane < 32; ++lane)
    queues[lane] = static_cast<WgmmaQueue*>(const_cast<void*>(lanes[lane].input));
  for (unsigned lane = 1; lane < 32; ++lane) {
    MT_CHECK(queues[lane]->committed.size() == queues[0]->committed.size(),
             "wgmma.wait_group: lane {} has {} committed groups, lane 0 has {} (wgmma is warpgroup-aligned: every "
             "thread must issue and commit the same instructions)",
             lane, queues[lane]->committed.size(), queues[0]->committed.size());
  }
  while (queues[0]->committed.size() > groups_left) {
    const std::size_t count = queues[0]->committed.front().size();
    for (std::size_t i = 0; i < count; ++i) {
      const QueuedWgmma* ops[32];
      for (unsigned lane = 0; lane < 32; ++lane) {
        const auto& group = queues[lane]->committed.front();
        MT_CHECK(group.size() == count && same_instruction(group[i].issue, queues[0]->committed.front()[i].issue),
                 "wgmma.wait_group: lane {} issued a different wgmma than lane 0 (it must be warpgroup-uniform)", lane);
        ops[lane] = &group[i];
      }
      multiply_for_warp(ops);
    }
    for (WgmmaQueue* queue : queues) queue->committed.pop_front();
  }
}

}  // namespace mt::simulator::hopper
