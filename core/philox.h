// Philox 4x32-10: the counter-based RNG behind every random number in mixtape.
//
// Counter-based means the n-th random block is a pure function of (key, n), so
// any thread on any device can compute its own numbers without shared state:
// the CPU backend and the CUDA kernels produce the same stream from the same
// seed. Constants from Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3" (SC'11), the same as cuRAND's and PyTorch's Philox.
//
// mixtape's stream convention (shared by CPU and CUDA):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (block low, block high, 0, 0) with block = generator offset + i/4
//   element i takes 32-bit word i%4 of its block.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#include "runtime/macros.h"

namespace mt {

struct PhiloxBlock {
  uint32_t word[4];
};

// The full generator: ten rounds over a 128-bit counter with a 64-bit key.
MT_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = counter.word[0], c1 = counter.word[1], c2 = counter.word[2], c3 = counter.word[3];
  uint32_t k0 = key0, k1 = key1;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// mixtape's stream: block number in the low 64 bits of the counter, seed as the key.
MT_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint64_t seed, uint64_t block) {
  const PhiloxBlock counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Eight consecutive blocks, first_block .. first_block + 7, of mixtape's
// stream: the same ten rounds, eight blocks at once. words[w][j] is word w
// of block first_block + j. Host code only (the CPU dropout and attention
// kernels). With AVX2 each round is a few vector instructions on eight
// lanes (the 32x32 -> 64-bit products by vpmuludq, even and odd lanes
// apart); elsewhere the lane-by-lane loop below, which compilers vectorise
// less well (1.3 ns per number on the project's AVX-512 VM).
#if defined(__AVX2__) && !defined(__CUDACC__)
namespace philox_detail {
// The high and low 32 bits of a * m for each of eight unsigned lanes.
inline void mul_hi_lo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0, 2, 4, 6 as 64-bit products
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0b10101010);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0b10101010);
}
}  // namespace philox_detail

inline void philox4x32_10_x8(uint64_t seed, uint64_t first_block, uint32_t (&words)[4][8]) {
  using philox_detail::mul_hi_lo;
  const auto low = static_cast<uint32_t>(first_block), high = static_cast<uint32_t>(first_block >> 32);
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  // A lane whose low word wrapped past 2^32 carries one into the high word
  // (unsigned c0 < low: compared with the sign bits flipped).
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i wrapped =
      _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(low)), sign), _mm256_xor_si256(c0, sign));
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(high)), wrapped);  // wrapped is -1
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, mul0, hi0, lo0);
    mul_hi_lo(c2, mul1, hi1, lo1);
    const __m256i next0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i next2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c1 = lo1;
    c3 = lo0;
    c0 = next0;
    c2 = next2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[0]), c0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[1]), c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[2]), c2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[3]), c3);
}
#else
inline void philox4x32_10_x8(uint64_t seed, uint64_t first_block, uint32_t (&words)[4][8]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0[8], c1[8], c2[8], c3[8];
  for (int j = 0; j < 8; ++j) {
    const uint64_t block = first_block + static_cast<uint64_t>(j);
    c0[j] = static_cast<uint32_t>(block);
    c1[j] = static_cast<uint32_t>(block >> 32);
    c2[j] = 0;
    c3[j] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < 8; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0[j];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2[j];
      const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0;
      const uint32_t next2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = static_cast<uint32_t>(p1);
      c3[j] = static_cast<uint32_t>(p0);
      c0[j] = next0;
      c2[j] = next2;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int j = 0; j < 8; ++j) {
    words[0][j] = c0[j];
    words[1][j] = c1[j];
    words[2][j] = c2[j];
    words[3][j] = c3[j];
  }
}
#endif

// A uniform float in [0, 1) from the top 24 bits (exactly representable in f32).
MT_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

#if !defined(__CUDACC__)
// The 32 numbers of philox4x32_10_x8's words in stream order (element k is
// word k % 4 of block k / 4) as keep flags of dropout with probability p:
// keep[k] = 1 where uniform_from_bits(element k) >= p, else 0. The
// conversion and the compare run eight lanes at a time with AVX2, and the
// flags come out in stream order by a register transpose: the scalar loop
// they replace took a mispredicted branch on every dropped element (the CPU
// attention's dropout factors were 9% of a bert-tiny bf16 step), and a
// scalar reordering loop after the compares was still half of what was left.
inline void philox_keep_x32(const uint32_t (&words)[4][8], float p, float (&keep)[32]) {
#if defined(__AVX2__)
  const __m256 threshold = _mm256_set1_ps(p), unit = _mm256_set1_ps(1.0f / 16777216.0f), one = _mm256_set1_ps(1.0f);
  __m256 w[4];  // w[j][b]: the flag of element 4 b + j
  for (int j = 0; j < 4; ++j) {
    const __m256i bits = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[j])), 8);
    const __m256 uniform = _mm256_mul_ps(_mm256_cvtepi32_ps(bits), unit);  // exact: bits < 2^24
    w[j] = _mm256_and_ps(_mm256_cmp_ps(uniform, threshold, _CMP_GE_OQ), one);
  }
  // Into stream order (a 4 x 8 transpose): element 4 b + j is w[j][b].
  const __m256 t0 = _mm256_unpacklo_ps(w[0], w[1]), t1 = _mm256_unpackhi_ps(w[0], w[1]);  // b 0,1 | 4,5 and 2,3 | 6,7
  const __m256 t2 = _mm256_unpacklo_ps(w[2], w[3]), t3 = _mm256_unpackhi_ps(w[2], w[3]);
  const __m256 b0 = _mm256_shuffle_ps(t0, t2, 0x44), b1 = _mm256_shuffle_ps(t0, t2, 0xEE);  // blocks 0 | 4, 1 | 5
  const __m256 b2 = _mm256_shuffle_ps(t1, t3, 0x44), b3 = _mm256_shuffle_ps(t1, t3, 0xEE);  // blocks 2 | 6, 3 | 7
  _mm256_storeu_ps(keep, _mm256_permute2f128_ps(b0, b1, 0x20));
  _mm256_storeu_ps(keep + 8, _mm256_permute2f128_ps(b2, b3, 0x20));
  _mm256_storeu_ps(keep + 16, _mm256_permute2f128_ps(b0, b1, 0x31));
  _mm256_storeu_ps(keep + 24, _mm256_permute2f128_ps(b2, b3, 0x31));
#else
  for (int k = 0; k < 32; ++k) keep[k] = uniform_from_bits(words[k % 4][k / 4]) >= p ? 1.0f : 0.0f;
#endif
}
#endif

// The i-th uniform of the stream starting at `block_offset`.
MT_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t block_offset, uint64_t i) {
  return uniform_from_bits(philox4x32_10(seed, block_offset + i / 4).word[i % 4]);
}

// The i-th standard normal: Box-Muller on words (0,1) for even i and (2,3)
// for odd i of block offset + i/2. u1 is kept in (0, 1] so log(u1) is finite.
MT_HOST_DEVICE inline float philox_normal(uint64_t seed, uint64_t block_offset, uint64_t i) {
  const PhiloxBlock b = philox4x32_10(seed, block_offset + i / 2);
  const int first = static_cast<int>(i % 2) * 2;
  const float u1 = (static_cast<float>(b.word[first] >> 8) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = uniform_from_bits(b.word[first + 1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

}  // namespace mt
