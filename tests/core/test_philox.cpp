// Philox 4x32-10 against the published known-answer vectors, and the
// distributions and reproducibility built on it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/generator.h"
#include "core/philox.h"

using namespace mt;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[philox]") {
  // From Random123's kat_vectors (philox4x32_10): counter, key -> output.
  struct Kat {
    PhiloxBlock counter;
    uint32_t key0, key1;
    PhiloxBlock expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const PhiloxBlock got = philox4x32_10(k.counter, k.key0, k.key1);
    for (int i = 0; i < 4; ++i) CHECK(got.word[i] == k.expected.word[i]);
  }
}

// The CPU dropout draws its mask eight blocks at a time; a lane or word
// mixed up there would change every mask silently (and break the CPU/GPU
// agreement of the stream). The carries cross 2^32 with a high word of 0
// and of 1 (the AVX2 path carries lane by lane).
TEST_CASE("philox4x32_10_x8 gives the same words as eight single blocks, across a 2^32 carry", "[philox]") {
  for (const uint64_t first : {uint64_t{0}, uint64_t{12345}, uint64_t{0xfffffffcu}, uint64_t{0x1fffffffbu}}) {
    const uint64_t seed = 0x1234567890abcdefull;
    uint32_t words[4][8];
    philox4x32_10_x8(seed, first, words);
    for (int j = 0; j < 8; ++j) {
      const PhiloxBlock one = philox4x32_10(seed, first + static_cast<uint64_t>(j));
      for (int w = 0; w < 4; ++w) {
        INFO("block " << first + static_cast<uint64_t>(j) << " word " << w);
        CHECK(words[w][j] == one.word[w]);
      }
    }
  }
}

// The CPU dropout and attention read the keep flags of 32 numbers in
// stream order (element k is word k % 4 of block k / 4); the AVX2 path
// reorders them with a register transpose, where a swapped shuffle would
// pair elements with the wrong words and drift from the GPU's mask.
TEST_CASE("philox_keep_x32 flags each number in stream order against p", "[philox]") {
  uint32_t words[4][8];
  philox4x32_10_x8(7, 1000, words);
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    float keep[32];
    philox_keep_x32(words, p, keep);
    for (int k = 0; k < 32; ++k) {
      INFO("p " << p << " element " << k);
      CHECK(keep[k] == (uniform_from_bits(words[k % 4][k / 4]) >= p ? 1.0f : 0.0f));
    }
  }
}

TEST_CASE("uniforms lie between 0 and 1 and normals have mean 0 and variance 1", "[philox]") {
  Generator gen(42);
  const auto u = rand({20000}, kF32, kCPU, &gen).to_vector();
  CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
  CHECK(*std::max_element(u.begin(), u.end()) < 1.0);
  double mean_u = 0;
  for (double v : u) mean_u += v;
  CHECK(mean_u / u.size() == Approx(0.5).margin(0.01));

  const auto n = randn({20000}, kF64, kCPU, &gen).to_vector();
  double mean = 0, sq = 0;
  for (double v : n) {
    mean += v;
    sq += v * v;
  }
  mean /= n.size();
  CHECK(mean == Approx(0.0).margin(0.03));
  CHECK(sq / n.size() - mean * mean == Approx(1.0).margin(0.05));
}

TEST_CASE("the same seed reproduces the same stream, draws advance it", "[philox]") {
  Generator a(7), b(7);
  const auto first_a = randn({10}, kF32, kCPU, &a).to_vector();
  const auto first_b = randn({10}, kF32, kCPU, &b).to_vector();
  CHECK(first_a == first_b);
  const auto second_a = randn({10}, kF32, kCPU, &a).to_vector();
  CHECK(second_a != first_a);
  // Saving and restoring the state replays the draw (checkpoint resume).
  const GeneratorState saved = a.state();
  const auto x = rand({5}, kF32, kCPU, &a).to_vector();
  a.set_state(saved);
  CHECK(rand({5}, kF32, kCPU, &a).to_vector() == x);
}

TEST_CASE("randperm is a seeded permutation", "[philox]") {
  Generator gen(3);
  auto p = randperm(100, &gen).to_vector();
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
  Generator again(3);
  CHECK(randperm(100, &again).to_vector() == p);
}
