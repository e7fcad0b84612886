// Internal: how the simulator completes each warp-synchronous operation.
//
// Every function here runs once per warp op, in the scheduler, after all
// lanes of the mask have arrived; it reads each lane's input and writes each
// lane's output (see warp_sync in runtime.h). They live in the (uninstrumented)
// simulator library so the race checker never mistakes them for kernel code.
#pragma once

#include <cstdint>

#include "runtime/sim/runtime.h"

namespace mt::simulator::warp_ops {

// Shuffles: input ShuffleInput, output std::uint64_t, op_arg = width.
struct ShuffleInput {
  std::uint64_t bits;
  int lane_arg;  // srcLane, delta or laneMask
};
void shuffle_index(unsigned mask, const WarpLane* lanes, std::uint64_t width);
void shuffle_up(unsigned mask, const WarpLane* lanes, std::uint64_t width);
void shuffle_down(unsigned mask, const WarpLane* lanes, std::uint64_t width);
void shuffle_xor(unsigned mask, const WarpLane* lanes, std::uint64_t width);

// Votes: input int predicate, output unsigned.
void ballot(unsigned mask, const WarpLane* lanes, std::uint64_t);
void vote_any(unsigned mask, const WarpLane* lanes, std::uint64_t);
void vote_all(unsigned mask, const WarpLane* lanes, std::uint64_t);
void syncwarp(unsigned mask, const WarpLane* lanes, std::uint64_t);

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
struct MmaInput {
  const std::uint32_t* a;  // 4 registers
  const std::uint32_t* b;  // 2 registers
  const float* c;          // 4 accumulators
};
void mma_m16n8k16_f16(unsigned mask, const WarpLane* lanes, std::uint64_t);   // output float[4]
void mma_m16n8k16_bf16(unsigned mask, const WarpLane* lanes, std::uint64_t);  // output float[4]

// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32: A u8, B s8, C/D s32.
struct MmaInt8Input {
  const std::uint32_t* a;  // 4 registers of 4 bytes
  const std::uint32_t* b;  // 2 registers of 4 bytes
  const std::int32_t* c;   // 4 accumulators
};
void mma_m16n8k32_u8s8(unsigned mask, const WarpLane* lanes, std::uint64_t);  // output std::int32_t[4]

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.b16: input the lane's row
// address, output uint32_t[matrices]; op_arg = matrices | (trans << 8).
void ldmatrix(unsigned mask, const WarpLane* lanes, std::uint64_t op_arg);

}  // namespace mt::simulator::warp_ops
