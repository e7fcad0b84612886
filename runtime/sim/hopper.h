// Internal: the simulator's Hopper pieces that are plain computation — the
// shared-memory swizzle, tensor-map tile copies and wgmma's matrix
// descriptors. The scheduler decides *when* they happen (scheduler.cpp);
// this file decides *what* they do, following the PTX ISA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/sim/runtime.h"

namespace mt::simulator::hopper {

// Where the hardware's swizzle puts a shared-memory byte: with a swizzle of S
// bytes (32, 64, 128) the 16-byte chunk index, address bits [4, 4 + log2(S/16)),
// is XORed with the row bits above the 128-byte line, bits [7, ...). 0 = none.
std::uintptr_t swizzle(std::uintptr_t address, unsigned swizzle_bytes);

// Throws mt::Error naming what cuTensorMapEncodeTiled would refuse (and what
// the simulator does not model).
void check_tensor_map(const TensorMapEncoding& encoding);
// The encoding kept in a tensor map's 128 bytes (throws when it holds none).
TensorMapEncoding read_tensor_map(const void* map);
std::uint32_t box_bytes(const TensorMapEncoding& map);
// Copies the box at `coords` into shared memory (the copy landing).
void land_tensor_tile(std::byte* shared_dst, const TensorMapEncoding& map, const std::int32_t (&coords)[3]);

// One thread's wgmma work: issued but not committed, and committed groups in
// order. Each entry remembers where its warp's shared window starts and which
// warp of the warpgroup issued it.
struct QueuedWgmma {
  WgmmaIssue issue;
  const std::byte* shared_base = nullptr;
  std::size_t shared_bytes = 0;
  unsigned warp_rank = 0;             // warp index within the warpgroup (0..3): its 16 rows of the 64
  std::uint64_t issued_checksum = 0;  // of the operands the warp reads, as they were at issue (lane 0)
};
struct WgmmaQueue {
  std::vector<QueuedWgmma> uncommitted;
  std::deque<std::vector<QueuedWgmma>> committed;
};

// A checksum of the shared memory the warp's multiply reads. The hardware
// may read it at any moment between issue and wait_group, so a correct kernel
// leaves it unchanged all that time; the simulator compares it at issue and
// at retire, and a change is reported as the race it is (a TMA still
// landing, a tile refilled too early).
std::uint64_t operand_checksum(const QueuedWgmma& op);

// Warp op (warp_sync): each lane's input is its WgmmaQueue*; retires the
// oldest committed groups until `groups_left` remain, performing their
// multiplies for the warp's 16 rows.
void wgmma_retire(unsigned mask, const WarpLane* lanes, std::uint64_t groups_left);

}  // namespace mt::simulator::hopper
