#include "kernels/common/channel_blocks.h"

#include <cstring>

#include "kernels/common/strided.h"
#include "runtime/error.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace mt::kernels::cpu {
namespace {

// Each tile below writes the transpose of an S x S tile: to[j * to_stride + i]
// = from[i * from_stride + j] for i, j < S (strides in elements).

#if defined(__AVX2__)
// 16 x 16 two-byte elements: 16 rows of one __m256i each, interleaved in
// three rounds (16-, 32-, 64-bit pairs within each 128-bit lane), then the
// two lanes of rows c and c + 8 swapped into place.
void tile16_u16(const uint16_t* from, int64_t from_stride, uint16_t* to, int64_t to_stride) {
  __m256i r[16], t[16], u[16], v[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i * from_stride));
  for (int i = 0; i < 8; ++i) {  // t[2i], t[2i+1]: rows 2i, 2i+1 paired, columns 0-3 | 8-11 and 4-7 | 12-15
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // rows 4i..4i+3, two columns each (and those columns + 8 in the high lane)
    u[4 * i + 0] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);      // columns 0, 1
    u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);      // columns 2, 3
    u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);  // columns 4, 5
    u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);  // columns 6, 7
  }
  for (int j = 0; j < 4; ++j) {  // columns 2j and 2j + 1, rows 0-7 and rows 8-15
    v[4 * j + 0] = _mm256_unpacklo_epi64(u[j], u[4 + j]);
    v[4 * j + 1] = _mm256_unpackhi_epi64(u[j], u[4 + j]);
    v[4 * j + 2] = _mm256_unpacklo_epi64(u[8 + j], u[12 + j]);
    v[4 * j + 3] = _mm256_unpackhi_epi64(u[8 + j], u[12 + j]);
  }
  for (int j = 0; j < 4; ++j) {
    for (int k = 0; k < 2; ++k) {
      const int c = 2 * j + k;  // low lanes hold column c, high lanes column c + 8
      const __m256i rows0_7 = v[4 * j + k], rows8_15 = v[4 * j + 2 + k];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + c * to_stride),
                          _mm256_permute2x128_si256(rows0_7, rows8_15, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + (c + 8) * to_stride),
                          _mm256_permute2x128_si256(rows0_7, rows8_15, 0x31));
    }
  }
}

// 8 x 8 two-byte elements in 128-bit registers, the same three rounds.
void tile8_u16(const uint16_t* from, int64_t from_stride, uint16_t* to, int64_t to_stride) {
  __m128i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i * from_stride));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);      // columns 0-3 of rows 2i, 2i + 1
    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // columns 4-7
  }
  for (int h = 0; h < 2; ++h) {                                     // rows 4h..4h+3
    u[4 * h + 0] = _mm_unpacklo_epi32(t[4 * h], t[4 * h + 2]);      // columns 0, 1
    u[4 * h + 1] = _mm_unpackhi_epi32(t[4 * h], t[4 * h + 2]);      // columns 2, 3
    u[4 * h + 2] = _mm_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);  // columns 4, 5
    u[4 * h + 3] = _mm_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);  // columns 6, 7
  }
  for (int j = 0; j < 4; ++j) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + (2 * j) * to_stride), _mm_unpacklo_epi64(u[j], u[4 + j]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + (2 * j + 1) * to_stride), _mm_unpackhi_epi64(u[j], u[4 + j]));
  }
}

// 8 x 8 four-byte elements (moved as floats: only bits move).
void tile8_u32(const uint32_t* from, int64_t from_stride, uint32_t* to, int64_t to_stride) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(from + i * from_stride));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {  // u[j]: columns j and j + 4 of rows 0-3 (low and high lanes); u[4 + j]: rows 4-7
    _mm256_storeu_ps(reinterpret_cast<float*>(to + j * to_stride), _mm256_permute2f128_ps(u[j], u[4 + j], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(to + (j + 4) * to_stride), _mm256_permute2f128_ps(u[j], u[4 + j], 0x31));
  }
}
#endif

// The same transposes element by element: a build without AVX2.
template <typename T, int S>
void tile_scalar(const T* from, int64_t from_stride, T* to, int64_t to_stride) {
  for (int i = 0; i < S; ++i) {
    for (int j = 0; j < S; ++j) to[j * to_stride + i] = from[i * from_stride + j];
  }
}

template <typename T, int S>
void tile(const T* from, int64_t from_stride, T* to, int64_t to_stride) {
#if defined(__AVX2__)
  if constexpr (sizeof(T) == 2 && S == 16) return tile16_u16(from, from_stride, to, to_stride);
  if constexpr (sizeof(T) == 2 && S == 8) return tile8_u16(from, from_stride, to, to_stride);
  if constexpr (sizeof(T) == 4 && S == 8) return tile8_u32(from, from_stride, to, to_stride);
#endif
  tile_scalar<T, S>(from, from_stride, to, to_stride);
}

// One sample's block of B channels: plain rows [B, plane] (row stride
// plane) to blocked [plane, B], or back. Tiles of S x S, then the positions
// past the last whole tile one by one.
template <typename T, int S>
void copy_block(const T* from, T* to, int64_t plane, int64_t block, bool to_blocked) {
  const int64_t whole = plane - plane % S;
  for (int64_t p = 0; p < whole; p += S) {
    for (int64_t c = 0; c < block; c += S) {
      if (to_blocked) {
        tile<T, S>(from + c * plane + p, plane, to + p * block + c, block);
      } else {
        tile<T, S>(from + p * block + c, block, to + c * plane + p, plane);
      }
    }
  }
  for (int64_t p = whole; p < plane; ++p) {
    for (int64_t c = 0; c < block; ++c) {
      if (to_blocked) {
        to[p * block + c] = from[c * plane + p];
      } else {
        to[c * plane + p] = from[p * block + c];
      }
    }
  }
}

// Both layouts keep each sample's block of channels in the same
// block * plane run of elements, so block b of the batch starts at
// b * block * plane in either.
template <typename T, int S>
void copy_all(const ChannelBlocks& g, const void* from, void* to, bool to_blocked) {
  const int64_t run = g.block * g.plane, blocks = g.batch * (g.channels / g.block);
  const T* src = static_cast<const T*>(from);
  T* dst = static_cast<T*>(to);
  parallel_for(blocks, run, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) copy_block<T, S>(src + b * run, dst + b * run, g.plane, g.block, to_blocked);
  });
}

void copy(const ChannelBlocks& g, const void* from, void* to, bool to_blocked) {
  MT_CHECK(channel_blocks_supported(g), "channel blocks: {}-byte elements in blocks of {} over {} channels",
           g.element_bytes, g.block, g.channels);
  if (g.element_bytes == 4) return copy_all<uint32_t, 8>(g, from, to, to_blocked);
  if (g.block == 16) return copy_all<uint16_t, 16>(g, from, to, to_blocked);
  copy_all<uint16_t, 8>(g, from, to, to_blocked);
}

}  // namespace

bool channel_blocks_supported(const ChannelBlocks& shape) {
  return (shape.element_bytes == 2 || shape.element_bytes == 4) && (shape.block == 8 || shape.block == 16) &&
         shape.channels % shape.block == 0 && shape.batch >= 0 && shape.plane >= 0;
}

void plain_to_channel_blocks(const ChannelBlocks& shape, const void* plain, void* blocked) {
  copy(shape, plain, blocked, /*to_blocked=*/true);
}

void channel_blocks_to_plain(const ChannelBlocks& shape, const void* blocked, void* plain) {
  copy(shape, blocked, plain, /*to_blocked=*/false);
}

}  // namespace mt::kernels::cpu
