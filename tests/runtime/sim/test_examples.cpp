// The example kernels (example_kernels.cu) on the simulator, against plain
// C++ references. gpu_examples.cpp runs the same kernels natively.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/fp8.h"
#include "runtime/sim/half.h"
#include "runtime/sim/runtime.h"
#include "tests/runtime/sim/example_kernels.h"

TEST_CASE("block_sum reduces across blocks", "[sim][examples]") {
  for (int n : {1, 255, 256, 1000, 70000}) {
    std::vector<float> in(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
    double expected = 0;
    for (float v : in) expected += v;
    float out = 0.0f;
    mt::sim::block_sum(in.data(), &out, n, {});
    INFO("n = " << n);
    CHECK(out == static_cast<float>(expected));  // small integers: exact
  }
}

// Catches: the barrier's phase parity not alternating (the second tile's wait
// would pass at once on the first phase and read the first tile again), a
// tile refilled while another thread still reads it, tiles of one block read
// by another.
TEST_CASE("bulk_copy_scale stages tiles through shared memory with cp.async.bulk and an mbarrier",
          "[sim][examples][mbarrier]") {
  constexpr int kTiles = 6, kTile = 256;
  std::vector<float> in(kTiles * kTile), out(kTiles * kTile, -1.0f);
  for (int i = 0; i < kTiles * kTile; ++i) in[i] = static_cast<float>(i % 97) - 40.0f;
  mt::sim::bulk_copy_scale(in.data(), out.data(), 3.0f, kTiles, {});
  for (int i = 0; i < kTiles * kTile; ++i) {
    INFO("element " << i);
    REQUIRE(out[i] == 3.0f * in[i]);
  }
}

// Catches: TMA not swizzling (or swizzling by the wrong row bits), the wgmma
// descriptors disagreeing with it (K-major A, N-major B), the accumulator
// fragment stored to the wrong rows or columns.
TEST_CASE("tma_wgmma_tile multiplies TMA-loaded, swizzled tiles with wgmma", "[sim][examples][wgmma]") {
  constexpr int kN = 64;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<std::uint16_t> a(kN * kN), b(kN * kN), a_shared(kN * kN);
  for (auto& v : a) v = mt::simulator::float_to_half_bits(float(small(rng)));
  for (auto& v : b) v = mt::simulator::float_to_half_bits(float(small(rng)));
  std::vector<float> c(kN * kN, -1.0f);
  mt::sim::tma_wgmma_tile(a.data(), b.data(), c.data(), a_shared.data(), {});
  for (int r = 0; r < kN; ++r) {
    for (int col = 0; col < kN; ++col) {
      float expected = 0;
      for (int k = 0; k < kN; ++k) {
        expected +=
            mt::simulator::half_bits_to_float(a[r * kN + k]) * mt::simulator::half_bits_to_float(b[k * kN + col]);
      }
      INFO("C[" << r << "][" << col << "]");
      REQUIRE(c[r * kN + col] == expected);  // small integers: exact in any order
      // A's element (r, col) sits in chunk (col / 8) ^ (r % 8) of its 128-byte row.
      REQUIRE(a_shared[r * kN + ((col / 8) ^ (r % 8)) * 8 + col % 8] == a[r * kN + col]);
    }
  }
}

namespace {

// E4M3 bits of random values in [lo, hi) (rounded to E4M3 by runtime/fp8.h).
std::vector<std::uint8_t> random_e4m3(std::size_t count, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(lo, hi);
  std::vector<std::uint8_t> bits(count);
  for (auto& b : bits) b = mt::f32_to_e4m3_bits(value(rng));
  return bits;
}

// The largest |c - exact| / |exact| of fp8_wgmma_gemm's 64 x 64 result, exact in f64.
double fp8_gemm_error(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b, int k, bool promote) {
  std::vector<float> c(64 * 64, -1.0f);
  mt::sim::fp8_wgmma_gemm(a.data(), b.data(), c.data(), k, promote, {});
  double worst = 0;
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 64; ++j) {
      double exact = 0;
      for (int p = 0; p < k; ++p)
        exact += double(mt::e4m3_bits_to_f32(a[i * k + p])) * mt::e4m3_bits_to_f32(b[j * k + p]);
      worst = std::max(worst, std::abs(c[i * 64 + j] - exact) / std::max(std::abs(exact), 1e-30));
    }
  }
  return worst;
}

// The simulator's FP8 accumulation model, on for one scope.
struct NarrowFp8Accumulator {
  explicit NarrowFp8Accumulator(int bits) { mt::simulator::set_fp8_accumulator_bits(bits); }
  ~NarrowFp8Accumulator() { mt::simulator::set_fp8_accumulator_bits(0); }
};

}  // namespace

TEST_CASE("fp8_wgmma_gemm multiplies E4M3 tiles with wgmma k32 exactly on small integers", "[sim][examples][wgmma]") {
  // Catches a wrong 8-bit operand layout (K in bytes), a k16 step for FP8, or E4M3 decoding.
  const int k = 256;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<std::uint8_t> a(64 * k), b(64 * k);
  for (auto& v : a) v = mt::f32_to_e4m3_bits(float(small(rng)));
  for (auto& v : b) v = mt::f32_to_e4m3_bits(float(small(rng)));
  for (bool promote : {false, true}) {
    INFO("promote " << promote);
    CHECK(fp8_gemm_error(a, b, k, promote) == 0.0);  // integer sums below 2^24: exact in any order
  }
}

TEST_CASE("FP8 sums over K = 4096 need promotion every 128 of K under narrow accumulation", "[sim][examples][wgmma]") {
  // Why DeepSeek-V3 (and GEMM v10) promote: with the Tensor Core's
  // accumulator kept to 14 significand bits, one long K sum loses accuracy
  // that promoting each 128 of K to f32 registers keeps. The accuracy check:
  // 1e-3 relative.
  const int k = 4096;
  const auto a = random_e4m3(64 * k, 0.5f, 1.5f, 1), b = random_e4m3(64 * k, 0.5f, 1.5f, 2);
  CHECK(fp8_gemm_error(a, b, k, false) < 1e-5);  // full f32 (the simulator's default): both are fine
  CHECK(fp8_gemm_error(a, b, k, true) < 1e-5);
  const NarrowFp8Accumulator model(14);
  const double unpromoted = fp8_gemm_error(a, b, k, false), promoted = fp8_gemm_error(a, b, k, true);
  INFO("unpromoted " << unpromoted << ", promoted " << promoted);
  CHECK(unpromoted > 1e-3);  // fails the accuracy check
  CHECK(promoted < 1e-3);    // passes it
}

TEST_CASE("fp8_convert_pairs packs the first value in the high byte, as cvt does", "[sim][examples]") {
  const std::vector<float> in = {1.0f, -2.0f, 1000.0f, 3.0e-3f, NAN, -INFINITY, 0.1f, 448.0f};
  std::vector<std::uint16_t> e4m3(in.size() / 2), e5m2(in.size() / 2);
  mt::sim::fp8_convert_pairs(in.data(), e4m3.data(), e5m2.data(), static_cast<int>(e4m3.size()), {});
  for (std::size_t i = 0; i < e4m3.size(); ++i) {
    CHECK(e4m3[i] == ((mt::f32_to_e4m3_bits(in[2 * i]) << 8) | mt::f32_to_e4m3_bits(in[2 * i + 1])));
    CHECK(e5m2[i] == ((mt::f32_to_e5m2_bits(in[2 * i]) << 8) | mt::f32_to_e5m2_bits(in[2 * i + 1])));
  }
  CHECK(e4m3[1] >> 8 == 0x7e);  // 1000 saturates to 448
}

TEST_CASE("transpose handles ragged edges", "[sim][examples]") {
  for (auto [rows, cols] : {std::pair{32, 32}, std::pair{45, 70}, std::pair{1, 33}}) {
    std::vector<float> in(rows * cols), out(rows * cols, -1.0f);
    for (int i = 0; i < rows * cols; ++i) in[i] = static_cast<float>(i);
    mt::sim::transpose(in.data(), out.data(), rows, cols, {});
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) REQUIRE(out[c * rows + r] == in[r * cols + c]);
    }
  }
}

TEST_CASE("mma_gemm_f16 (cp.async + ldmatrix + mma) matches a naive GEMM", "[sim][examples][mma]") {
  const int m = 32, n = 24, k = 48;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<std::uint16_t> a(m * k), b(k * n);
  for (auto& v : a) v = mt::simulator::float_to_half_bits(float(small(rng)));
  for (auto& v : b) v = mt::simulator::float_to_half_bits(float(small(rng)));
  std::vector<float> c(m * n, -1.0f);
  mt::sim::mma_gemm_f16(a.data(), b.data(), c.data(), m, n, k, {});
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float expected = 0;
      for (int p = 0; p < k; ++p) {
        expected += mt::simulator::half_bits_to_float(a[i * k + p]) * mt::simulator::half_bits_to_float(b[p * n + j]);
      }
      REQUIRE(c[i * n + j] == expected);
    }
  }
}

TEST_CASE("example kernels are race-free under racecheck", "[sim][examples][racecheck]") {
  mt::simulator::set_racecheck_enabled(true);
  (void)mt::simulator::take_race_reports();
  std::vector<float> in(3000, 1.0f);
  float out = 0.0f;
  mt::sim::block_sum(in.data(), &out, 3000, {});
  std::vector<float> t_out(45 * 70);
  std::vector<float> t_in(45 * 70, 2.0f);
  mt::sim::transpose(t_in.data(), t_out.data(), 45, 70, {});
  std::vector<std::uint16_t> a(16 * 16, 0x3c00), b(16 * 8, 0x3c00);
  std::vector<float> c(16 * 8);
  mt::sim::mma_gemm_f16(a.data(), b.data(), c.data(), 16, 8, 16, {});
  mt::simulator::set_racecheck_enabled(false);
  CHECK(mt::simulator::take_race_reports().empty());
  CHECK(out == 3000.0f);
  CHECK(c[0] == 16.0f);
}
