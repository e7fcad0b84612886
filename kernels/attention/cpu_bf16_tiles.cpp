// The CPU attention's BF16 tile products (see cpu_bf16_tiles.h).
//
// What: c (+)= alpha a b for the tiles of the fused CPU attention (64 x 64
//   scores against head dims of 64 or so), in vdpbf16ps: each instruction
//   multiplies 16 pairs of bf16 values by 16 pairs and adds each pair's two
//   products to one f32 lane, 32 multiply-adds where an f32 FMA does 8 with
//   AVX2 (the build's baseline; Eigen's f32 tile products ran at that width).
// How: a register block of 8 rows x 32 columns (16 accumulators): per pair
//   of k, two loads of b's packed pairs and, per row, one broadcast of a's
//   pair; the block is written once at the end (masked at the edges).
//   Compiled for AVX-512 by function attributes and entered only where
//   available() says the CPU has it, so the build stays x86-64-v3.
// Precision: a bf16 x bf16 product is exact in f32, and the instruction adds
//   the two products of a pair to the accumulator one at a time, each sum
//   rounded to nearest even: the f32 FMA chain's arithmetic in another
//   order. It treats subnormal inputs and results as zero (DAZ/FTZ), which
//   attention's softmax-sized values do not meet. What loses precision is
//   the packing of f32 operands (P, dS) to bf16, stated in the header.
// Speed: see kernels/attention/cpu.cpp's header (measured there, in use).
#include "kernels/attention/cpu_bf16_tiles.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/common/bf16x8.h"
#include "kernels/common/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MT_BF16_TILES 1
#define MT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define MT_BF16_TILES 0
#endif

namespace mt::kernels::cpu::bf16_tiles {
namespace {

constexpr int64_t kBlockRows = 8;
constexpr int64_t kBlockColumns = 32;          // two registers of 16 f32 lanes
constexpr int64_t kSlack = 2 * kBlockColumns;  // a column view's last block reads up to 31 columns past ld

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

uint16_t bf16_bits(float value) { return f32_to_bf16_bits(value); }
uint16_t bf16_bits(BFloat16 value) { return value.bits; }

uint16_t* zeroed(std::vector<uint16_t>& storage, int64_t n) {
  if (static_cast<int64_t>(storage.size()) < n) storage.resize(static_cast<size_t>(n));
  std::fill_n(storage.data(), n, uint16_t{0});
  return storage.data();
}

#if MT_BF16_TILES
bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

MT_AVX512_BF16 __mmask16 lanes_below(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1u);
}

// Rows [m0, m0 + R) x columns [n0, n0 + width) of c, width <= 32.
template <int R>
MT_AVX512_BF16 void block(const Bf16Rows& a, const Bf16Pairs& b, int64_t m0, int64_t n0, int64_t width, float alpha,
                          bool accumulate, float* c, int64_t ldc) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) low[r] = high[r] = _mm512_setzero_ps();
  const uint16_t* a_rows = a.bits + m0 * a.ld;
  const uint16_t* b_pairs = b.bits + n0 * 2;
  const int64_t pairs = (a.k + 1) / 2;
  for (int64_t kk = 0; kk < pairs; ++kk) {
    const uint16_t* b_row = b_pairs + kk * b.ld * 2;
    const __m512bh b_low = (__m512bh)_mm512_loadu_si512(b_row);
    const __m512bh b_high = (__m512bh)_mm512_loadu_si512(b_row + 32);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a_rows + r * a.ld + 2 * kk, sizeof pair);
      const __m512bh a_pair = (__m512bh)_mm512_set1_epi32(pair);
      low[r] = _mm512_dpbf16_ps(low[r], a_pair, b_low);
      high[r] = _mm512_dpbf16_ps(high[r], a_pair, b_high);
    }
  }
  const __mmask16 low_mask = lanes_below(width), high_mask = lanes_below(width - 16);
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int r = 0; r < R; ++r) {
    float* row = c + (m0 + r) * ldc + n0;
    __m512 lo = _mm512_mul_ps(low[r], scale), hi = _mm512_mul_ps(high[r], scale);
    if (accumulate) {
      lo = _mm512_add_ps(_mm512_maskz_loadu_ps(low_mask, row), lo);
      hi = _mm512_add_ps(_mm512_maskz_loadu_ps(high_mask, row + 16), hi);
    }
    _mm512_mask_storeu_ps(row, low_mask, lo);
    _mm512_mask_storeu_ps(row + 16, high_mask, hi);
  }
}

template <int R>
void rows_block(const Bf16Rows& a, const Bf16Pairs& b, int64_t m0, int64_t rows, int64_t n0, int64_t width, float alpha,
                bool accumulate, float* c, int64_t ldc) {
  if constexpr (R > 1) {
    if (rows < R) return rows_block<R - 1>(a, b, m0, rows, n0, width, alpha, accumulate, c, ldc);
  }
  block<R>(a, b, m0, n0, width, alpha, accumulate, c, ldc);
}
#endif

}  // namespace

bool available() {
#if MT_BF16_TILES
  static const bool has = cpu_has_avx512_bf16();
  return has && cpu_gemm_library() != CpuGemmLibrary::Eigen;
#else
  return false;
#endif
}

// The packers move bf16 values in pairs as 32-bit words where they can: a
// value per store (with the index arithmetic of the layout) made packing
// cost a third of the products it feeds. The words alias the u16 storage.
using PairWord = uint32_t __attribute__((may_alias));

template <typename S>
Bf16Rows pack_rows(const S* src, int64_t stride, int64_t m, int64_t k, std::vector<uint16_t>& storage) {
  const int64_t ld = round_up(k, 2);
  uint16_t* dst = zeroed(storage, m * ld);
  for (int64_t r = 0; r < m; ++r) {
    const S* in = src + r * stride;
    uint16_t* out = dst + r * ld;
    int64_t c = 0;
#if defined(__AVX2__)
    if constexpr (std::is_same_v<S, float>) {
      for (; c + 8 <= k; c += 8) narrow_bf16x8(in + c, reinterpret_cast<BFloat16*>(out + c));
    }
#endif
    for (; c < k; ++c) out[c] = bf16_bits(in[c]);
  }
  return {dst, m, k, ld};
}

// out[j] = the pair word of even[j] and odd[j] (odd absent: a zero high
// half) for j < n, eight at a time for f32 sources.
template <typename S>
void pair_words(const S* even, const S* odd, int64_t n, PairWord* out) {
  int64_t j = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<S, float>) {
    for (; j + 8 <= n; j += 8) {
      const __m256i low = bf16_bits_x8(_mm256_loadu_ps(even + j));
      const __m256i high =
          odd != nullptr ? _mm256_slli_epi32(bf16_bits_x8(_mm256_loadu_ps(odd + j)), 16) : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm256_or_si256(low, high));
    }
  }
#endif
  for (; j < n; ++j)
    out[j] = bf16_bits(even[j]) | (odd != nullptr ? static_cast<uint32_t>(bf16_bits(odd[j])) << 16 : 0u);
}

// dst[c * dst_stride + r] = word (r, c) for r < rows, c < cols, word (r, c)
// being the 32 bits at src + r * src_stride + 2 c (strides in their own
// units; src rows need no alignment): a transpose of 32-bit words, eight by
// eight in AVX2 registers (a word per store took 1.3 us per 64 x 64 bf16
// tile, a quarter of the product it fed).
void transpose_words(const uint16_t* src, int64_t src_stride, int64_t rows, int64_t cols, PairWord* dst,
                     int64_t dst_stride) {
  const auto word = [&](int64_t r, int64_t c) {
    uint32_t w;
    std::memcpy(&w, src + r * src_stride + 2 * c, sizeof w);
    return w;
  };
  int64_t r0 = 0;
#if defined(__AVX2__)
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8) {
      __m256i t[8], u[8];
      for (int i = 0; i < 8; ++i) {
        t[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (r0 + i) * src_stride + 2 * c0));
      }
      for (int i = 0; i < 8; i += 2) {  // pairs of rows, interleaved by word
        u[i] = _mm256_unpacklo_epi32(t[i], t[i + 1]);
        u[i + 1] = _mm256_unpackhi_epi32(t[i], t[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {  // fours of rows: columns 0,4 | 1,5 | 2,6 | 3,7 in 128-bit halves
        t[i] = _mm256_unpacklo_epi64(u[i], u[i + 2]);
        t[i + 1] = _mm256_unpackhi_epi64(u[i], u[i + 2]);
        t[i + 2] = _mm256_unpacklo_epi64(u[i + 1], u[i + 3]);
        t[i + 3] = _mm256_unpackhi_epi64(u[i + 1], u[i + 3]);
      }
      for (int c = 0; c < 4; ++c) {  // rows 0-3 and 4-7 of columns c and c + 4
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c0 + c) * dst_stride + r0),
                            _mm256_permute2x128_si256(t[c], t[c + 4], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c0 + c + 4) * dst_stride + r0),
                            _mm256_permute2x128_si256(t[c], t[c + 4], 0x31));
      }
    }
    for (int64_t c = c0; c < cols; ++c) {
      for (int64_t r = r0; r < r0 + 8; ++r) dst[c * dst_stride + r] = word(r, c);
    }
  }
#endif
  for (int64_t r = r0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * dst_stride + r] = word(r, c);
  }
}

template <typename S>
Bf16Rows pack_rows_of_transpose(const S* src, int64_t stride, int64_t k, int64_t m, std::vector<uint16_t>& storage) {
  const int64_t ld = round_up(k, 2), pairs = ld / 2;
  uint16_t* dst = zeroed(storage, m * ld);
  // Source rows c and c + 1 become word c / 2 of every output row: built as
  // rows of words, then transposed.
  thread_local std::vector<uint32_t> words;
  if (static_cast<int64_t>(words.size()) < pairs * m) words.resize(static_cast<size_t>(pairs * m));
  for (int64_t c = 0; c < k; c += 2) {
    const S* even = src + c * stride;
    pair_words(even, c + 1 < k ? even + stride : nullptr, m, reinterpret_cast<PairWord*>(words.data() + c / 2 * m));
  }
  transpose_words(reinterpret_cast<const uint16_t*>(words.data()), 2 * m, pairs, m, reinterpret_cast<PairWord*>(dst),
                  ld / 2);
  return {dst, m, k, ld};
}

template <typename S>
Bf16Pairs pack_pairs(const S* src, int64_t stride, int64_t k, int64_t n, std::vector<uint16_t>& storage) {
  const int64_t ld = round_up(std::max<int64_t>(n, 1), kBlockColumns);
  uint16_t* dst = zeroed(storage, (k + 1) / 2 * ld * 2 + kSlack);
  for (int64_t r = 0; r < k; r += 2) {
    const S* even = src + r * stride;
    pair_words(even, r + 1 < k ? even + stride : nullptr, n, reinterpret_cast<PairWord*>(dst + r / 2 * ld * 2));
  }
  return {dst, k, n, ld};
}

// Each source row's pairs of values are already the words wanted: their
// transpose, and the odd k's last value alone.
Bf16Pairs pack_pairs_of_transpose(const BFloat16* src, int64_t stride, int64_t n, int64_t k,
                                  std::vector<uint16_t>& storage) {
  const int64_t ld = round_up(std::max<int64_t>(n, 1), kBlockColumns);
  uint16_t* dst = zeroed(storage, (k + 1) / 2 * ld * 2 + kSlack);
  PairWord* pairs = reinterpret_cast<PairWord*>(dst);
  const auto* bits = reinterpret_cast<const uint16_t*>(src);
  transpose_words(bits, stride, n, k / 2, pairs, ld);
  if (k % 2 != 0) {
    for (int64_t j = 0; j < n; ++j) pairs[k / 2 * ld + j] = src[j * stride + k - 1].bits;
  }
  return {dst, k, n, ld};
}

template Bf16Rows pack_rows(const float*, int64_t, int64_t, int64_t, std::vector<uint16_t>&);
template Bf16Rows pack_rows(const BFloat16*, int64_t, int64_t, int64_t, std::vector<uint16_t>&);
template Bf16Rows pack_rows_of_transpose(const float*, int64_t, int64_t, int64_t, std::vector<uint16_t>&);
template Bf16Pairs pack_pairs(const float*, int64_t, int64_t, int64_t, std::vector<uint16_t>&);
template Bf16Pairs pack_pairs(const BFloat16*, int64_t, int64_t, int64_t, std::vector<uint16_t>&);

void multiply(const Bf16Rows& a, const Bf16Pairs& b, float alpha, bool accumulate, float* c, int64_t ldc) {
  MT_CHECK(a.k == b.k, "bf16 tile product: a has {} columns, b {} rows", a.k, b.k);
#if MT_BF16_TILES
  MT_CHECK(available(), "bf16 tile product: this CPU has no AVX512-BF16");
  for (int64_t n0 = 0; n0 < b.n; n0 += kBlockColumns) {
    const int64_t width = std::min(kBlockColumns, b.n - n0);
    for (int64_t m0 = 0; m0 < a.m; m0 += kBlockRows) {
      const int64_t rows = std::min(kBlockRows, a.m - m0);
      rows_block<kBlockRows>(a, b, m0, rows, n0, width, alpha, accumulate, c, ldc);
    }
  }
#else
  (void)alpha, (void)accumulate, (void)c, (void)ldc;
  fail("bf16 tile product: not built for this architecture");
#endif
}

}  // namespace mt::kernels::cpu::bf16_tiles
