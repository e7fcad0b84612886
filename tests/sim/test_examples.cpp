// The example kernels (example_kernels.cu) on the simulator, against plain
// C++ references. gpu_examples.cpp runs the same kernels natively.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/sim/half.h"
#include "runtime/sim/runtime.h"
#include "tests/sim/example_kernels.h"

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
