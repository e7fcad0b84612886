// Long sums, vectorised and still deterministic: LaneSum (in double, any
// terms), and the row sums below (f32 rows in f32 blocks, f64 rows in
// LaneSum).
//
// One running `sum += p[i]` is a chain of dependent adds: the CPU waits an
// add's latency (4 cycles) per element and the compiler may not reorder it.
// LaneSum keeps kLanes independent accumulators (element i of each run of
// kLanes goes to lane i), which the compiler turns into vector adds, and
// adds the lanes in one fixed tree at the end. The order depends only on the
// lengths of the runs added, never on the thread count, so a kernel that
// gives each output its own LaneSum stays bit-identical on any number of
// threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/half_runs.h"

namespace mt::kernels::cpu {

class LaneSum {
 public:
  static constexpr int kLanes = 8;

  // Adds term(0) .. term(n - 1).
  template <typename Term>
  void add(int64_t n, Term&& term) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int lane = 0; lane < kLanes; ++lane) lanes_[lane] += static_cast<double>(term(i + lane));
    }
    for (int lane = 0; i < n; ++i, ++lane) lanes_[lane] += static_cast<double>(term(i));
  }

  double total() const {
    return ((lanes_[0] + lanes_[1]) + (lanes_[2] + lanes_[3])) + ((lanes_[4] + lanes_[5]) + (lanes_[6] + lanes_[7]));
  }

 private:
  double lanes_[kLanes] = {};
};

// ---- Row sums: batch norm's statistics, the conv bias gradient ----------
//
// Sums over one row of f32 values, in blocks of kSumBlock: within a block,
// two eight-lane f32 accumulators (two independent add chains) and the
// last < 8 terms in order, the lanes folded in a fixed tree; the blocks'
// totals added in double. A term meets at most 32 + 5 roundings in f32 (a
// lane adds kSumBlock / 16 of them), so a row's sum is within about 37 f32
// ulps of its terms' magnitudes however long the row. LaneSum for the same
// rows converted every term to double and kept one chain per four lanes: a
// bf16 batch norm's statistics waited on its dependent adds (perf), and a
// single-threaded bf16 batch norm of [128, 32, 28, 28] took 1.69 ms forward
// (4.30 with its backward) against 1.07 (3.13) with these. The order depends only on n. f64 rows keep
// LaneSum.
constexpr int64_t kSumBlock = 512;

// sum over i < n of term(i), with vec(i) the eight terms from i on.
template <typename Vec, typename Term>
double block_sum_f32(int64_t n, Vec&& vec, Term&& term) {
  double total = 0;
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t end = std::min(n, start + kSumBlock);
    int64_t i = start;
    float block = 0;
#if MT_F32X8_LANES
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (; i + 16 <= end; i += 16) {
      a = _mm256_add_ps(a, vec(i));
      b = _mm256_add_ps(b, vec(i + 8));
    }
    if (i + 8 <= end) {
      a = _mm256_add_ps(a, vec(i));
      i += 8;
    }
    a = _mm256_add_ps(a, b);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    block = _mm_cvtss_f32(h);
#else
    (void)vec;
#endif
    float rest = 0;
    for (; i < end; ++i) rest += term(i);
    total += static_cast<double>(block) + static_cast<double>(rest);
  }
  return total;
}

// The row sums of f32 rows, and of bf16 and f16 rows read in place (each
// value widened exactly in its lane, so a 16-bit row sums to the same bits
// as its f32 copy would).
template <typename S>
concept F32Row = std::is_same_v<S, float> || std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>;

template <F32Row S>
double sum_of(const S* p, int64_t n) {
  auto at = [p](int64_t i) { return static_cast<float>(p[i]); };
#if MT_F32X8_LANES
  return block_sum_f32(
      n, [p](int64_t i) { return load_f32x8(p + i); }, at);
#else
  return block_sum_f32(n, nullptr, at);
#endif
}

// sum of (p[i] - m)^2.
template <F32Row S>
double sum_of_squared_deviations(const S* p, float m, int64_t n) {
  auto at = [p, m](int64_t i) { return (static_cast<float>(p[i]) - m) * (static_cast<float>(p[i]) - m); };
#if MT_F32X8_LANES
  const __m256 vm = _mm256_set1_ps(m);
  return block_sum_f32(
      n,
      [p, vm](int64_t i) {
        const __m256 d = _mm256_sub_ps(load_f32x8(p + i), vm);
        return _mm256_mul_ps(d, d);
      },
      at);
#else
  return block_sum_f32(n, nullptr, at);
#endif
}

// sum of g[i] * (p[i] - m).
template <F32Row S>
double sum_of_products_with_deviations(const S* g, const S* p, float m, int64_t n) {
  auto at = [g, p, m](int64_t i) { return static_cast<float>(g[i]) * (static_cast<float>(p[i]) - m); };
#if MT_F32X8_LANES
  const __m256 vm = _mm256_set1_ps(m);
  return block_sum_f32(
      n, [g, p, vm](int64_t i) { return _mm256_mul_ps(load_f32x8(g + i), _mm256_sub_ps(load_f32x8(p + i), vm)); }, at);
#else
  return block_sum_f32(n, nullptr, at);
#endif
}

inline double sum_of(const double* p, int64_t n) {
  LaneSum sum;
  sum.add(n, [p](int64_t i) { return p[i]; });
  return sum.total();
}

inline double sum_of_squared_deviations(const double* p, double m, int64_t n) {
  LaneSum sum;
  sum.add(n, [p, m](int64_t i) { return (p[i] - m) * (p[i] - m); });
  return sum.total();
}

inline double sum_of_products_with_deviations(const double* g, const double* p, double m, int64_t n) {
  LaneSum sum;
  sum.add(n, [g, p, m](int64_t i) { return g[i] * (p[i] - m); });
  return sum.total();
}

}  // namespace mt::kernels::cpu
