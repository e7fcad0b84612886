// How an optimizer keeps its moments: f32, BF16 with stochastic rounding, or
// 8 bits per value with one f32 absmax per block (Dettmers et al., "8-bit
// Optimizers via Block-wise Quantization", the scheme of bitsandbytes).
//
// Memory, per parameter, for AdamW's two moments: f32 8 bytes, BF16 4 bytes,
// int8 2 bytes + 8 bytes per block of 2048 (the two absmaxes).
//
// BF16 moments. A moment is updated in f32 and written back to BF16 by
// stochastic rounding: 16 random bits are added below BF16's last mantissa
// bit and the sum truncated, so the rounding goes up with probability equal
// to the discarded fraction and the moment is right *on average* (an EMA with
// beta2 = 0.999 adds 0.1% of g^2 per step, well under BF16's 0.4% step, so
// round-to-nearest would freeze it). The random bits come from Philox keyed
// by the parameter and counted by its step, not from a host-side offset: a
// resumed run draws the same bits, and a CUDA graph replays a new draw on
// every step.
//
// 8-bit moments. Each tensor is cut into blocks of `block_size` values (2048
// by default, a power of two from 64 to 4096); a block stores one f32 absmax
// and one byte per value: the index of the nearest entry of a 256-entry code
// after dividing by the absmax. The update runs in registers: dequantize
// (code[byte] * absmax) -> the f32 AdamW update -> the block's new absmax ->
// quantize. The parameter step uses the f32 moments of this step, before they
// are quantized again.
//
// The codes are the "dynamic tree" codes of Dettmers (2016): a decimal
// exponent and a fraction whose bits shrink as the exponent grows, so
// relative precision is roughly even across seven decades. Decade d = 0..6
// covers [0.1, 1] x 10^(d - 6) with n_d evenly spaced interval centres:
//   value(d, j) = 10^(d - 6) * (0.1 + (j + 0.5) * 0.9 / n_d),  j = 0 .. n_d - 1
// - signed code (exp_avg, SGD momentum): n_d = 2^d, each value with both
//   signs, plus 0 and +1: 127 + 127 + 2 = 256 entries;
// - unsigned code (exp_avg_sq, never negative): n_d = 2^(d+1), plus 0 and 1:
//   254 + 2 = 256 entries, twice the resolution of the signed one.
// Sorted ascending, the byte is the index. Smallest non-zero magnitudes:
// 5.5e-7 (signed) and 3.25e-7 (unsigned) of the block's absmax; values below
// half of that round to 0. The tables are made once on the host (f64
// arithmetic, rounded to f32) and copied to each device, so CPU and GPU
// quantize with the same bits.
//
// Rounding: to the nearest code value; exactly halfway goes to the lower
// index. The search is a binary search over the sorted table (8 steps).
#pragma once

#include <array>
#include <cstdint>

#include "runtime/macros.h"

namespace mt::kernels {

enum class StateFormat : std::uint8_t {
  Plain,           // the state tensor's own dtype (f32, or f16/bf16 for pure low precision), rounded to nearest
  Bf16Stochastic,  // BF16 moments written by stochastic rounding
  Int8Blockwise,   // u8 codes + one f32 absmax per block
};

inline constexpr int kCodeEntries = 256;
inline constexpr std::uint8_t kSignedZeroCode = 127;  // index of 0 in the signed code
inline constexpr std::uint8_t kUnsignedZeroCode = 0;
inline constexpr std::int64_t kMinStateBlock = 64;
inline constexpr std::int64_t kMaxStateBlock = 4096;

// The two tables, host side: [0, 256) signed, [256, 512) unsigned.
const std::array<float, 2 * kCodeEntries>& dynamic_codes();

// The index of the code value nearest to x (code sorted ascending, 256 entries).
MT_HOST_DEVICE inline std::uint8_t nearest_code(const float* code, float x) {
  int lo = 0;  // invariant: the answer's lower neighbour is at >= lo
  for (int step = kCodeEntries / 2; step >= 1; step /= 2) {
    if (code[lo + step] <= x) lo += step;
  }
  // code[lo] <= x < code[lo + 1], or x below code[0] / at or above code[255].
  if (lo == kCodeEntries - 1 || x <= code[0]) return static_cast<std::uint8_t>(lo);
  return static_cast<std::uint8_t>(code[lo + 1] - x < x - code[lo] ? lo + 1 : lo);
}

// Quantizes value against a block's absmax (0 absmax: the block is all zeros).
MT_HOST_DEVICE inline std::uint8_t quantize_state(const float* code, float value, float absmax,
                                                  std::uint8_t zero_code) {
  return absmax > 0.0f ? nearest_code(code, value / absmax) : zero_code;
}

MT_HOST_DEVICE inline float dequantize_state(const float* code, std::uint8_t byte, float absmax) {
  return code[byte] * absmax;
}

// Every random bit an optimizer step rounds with is keyed by the parameter
// and counted by its step, which lives on the device: a resumed run draws
// the same bits, and a CUDA graph draws new ones on every replay.
//
// The key of a parameter's rounding streams: the optimizer's seed mixed with
// the parameter's position, so no two parameters share bits.
inline std::uint64_t rounding_key(std::uint64_t seed, std::uint64_t parameter_index) {
  return seed ^ (0x9E3779B97F4A7C15ull * (parameter_index + 1)) ^ 0x5354415445ull;  // "STATE"
}

// The moments' bits of element i at step t: block (t << 32) | i / 2 of the
// parameter's key, words 2 (i % 2) and 2 (i % 2) + 1 for the two moments.
MT_HOST_DEVICE inline std::uint64_t state_rounding_block(float step, std::int64_t i) {
  return (static_cast<std::uint64_t>(step) << 32) | static_cast<std::uint64_t>(i / 2);
}

// The bf16 parameter copy's bits (stochastic rounding from an f32 master):
// word i % 4 of block (t << 32) | i / 4, under a key of its own.
MT_HOST_DEVICE inline std::uint64_t param_rounding_key(std::uint64_t key) { return key ^ 0x504152414Dull; }  // "PARAM"
MT_HOST_DEVICE inline std::uint64_t param_rounding_block(float step, std::int64_t i) {
  return (static_cast<std::uint64_t>(step) << 32) | static_cast<std::uint64_t>(i / 4);
}

}  // namespace mt::kernels
