// F16 / BF16 conversions: bit-exact at the edges AMP depends on.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "runtime/half.h"
#include "mixtape.h"

using mt::bf16_bits_to_f32;
using mt::f16_bits_to_f32;
using mt::f32_to_bf16_bits;
using mt::f32_to_f16_bits;

TEST_CASE("f16: largest finite, overflow to inf and the 65520 boundary", "[half]") {
  CHECK(f32_to_f16_bits(65504.0f) == 0x7bff);
  CHECK(f16_bits_to_f32(0x7bff) == 65504.0f);
  CHECK(f32_to_f16_bits(65519.996f) == 0x7bff);  // just below the midpoint rounds down
  CHECK(f32_to_f16_bits(65520.0f) == 0x7c00);    // the midpoint ties to even: inf
  CHECK(f32_to_f16_bits(1e6f) == 0x7c00);
  CHECK(f32_to_f16_bits(-70000.0f) == 0xfc00);
  CHECK(std::isinf(f16_bits_to_f32(0x7c00)));
}

TEST_CASE("f16: smallest normal and subnormals", "[half]") {
  CHECK(f32_to_f16_bits(6.103515625e-5f) == 0x0400);  // 2^-14, smallest normal
  CHECK(f16_bits_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);  // 5.96e-8, smallest subnormal
  CHECK(f16_bits_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // exactly half: ties to even -> 0
  CHECK(f32_to_f16_bits(std::ldexp(1.5f, -25)) == 0x0001);  // above half rounds up
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(f32_to_f16_bits(-std::ldexp(1.0f, -26)) == 0x8000);    // keeps the sign of zero
  CHECK(f32_to_f16_bits(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 ulp ties to even (2)
  CHECK(f32_to_f16_bits(std::ldexp(1023.0f, -24)) == 0x03ff);  // largest subnormal
  CHECK(f32_to_f16_bits(std::ldexp(1023.5f, -24)) == 0x0400);  // rounds up into the normals
  CHECK(f16_bits_to_f32(0x03ff) == std::ldexp(1023.0f, -24));
}

TEST_CASE("f16: round to nearest even in the normal range", "[half]") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3c00);
  CHECK(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie between 1 and 1+2^-10: even is 1
  CHECK(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie: even is 1+2^-9
  CHECK(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(f32_to_f16_bits(-2.5f) == 0xc100);
  CHECK(f32_to_f16_bits(0.1f) == 0x2e66);
}

TEST_CASE("f16: NaN stays NaN, every f16 value round-trips", "[half]") {
  CHECK(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = f16_bits_to_f32(h);
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16_bits(f) == h);
  }
}

TEST_CASE("bf16: f32's range with 8 bits of significand", "[half]") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits_to_f32(0x3f80) == 1.0f);
  CHECK(f32_to_bf16_bits(65520.0f) == 0x4780);  // no overflow where f16 would give inf
  CHECK(f32_to_bf16_bits(1e38f) != 0x7f80);
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up past the largest bf16
  CHECK(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);        // tie to even
  CHECK(f32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(f32_to_bf16_bits(std::ldexp(1.0f, -130)) == 0x0008);  // subnormals survive (2^-130 = 8 * 2^-133)
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1e-8f)) > 0.0f);    // where f16 flushes to zero
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = bf16_bits_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_bf16_bits(f) == bits);
  }
}

// Catches: two converters that disagree on NaN (core's kept the payload,
// 0x7e00 for a plain NaN; the simulator's gave the GPU's 0x7fff), so a NaN
// written by the CPU path and by the CUDA path had different bits.
TEST_CASE("NaN converts to the GPU's canonical bits on the CPU and on sim alike", "[half]") {
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc12345u)}) {
    CHECK(f32_to_f16_bits(nan) == 0x7fffu);
    CHECK(f32_to_bf16_bits(nan) == 0x7fffu);
  }
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::infinity()) == 0x7c00u);
  CHECK(f32_to_f16_bits(-std::numeric_limits<float>::infinity()) == 0xfc00u);
  using namespace mt;
  const Tensor x = from_vector(std::vector<double>{1.0, std::nan(""), -2.0}, {3});
  for (DType dtype : {kF16, kBF16}) {
    const Tensor on_cpu = x.to(dtype), on_sim = x.to(kSIM).to(dtype).to(kCPU);
    const auto* a = static_cast<const uint16_t*>(on_cpu.data_ptr());
    const auto* b = static_cast<const uint16_t*>(on_sim.data_ptr());
    for (int i = 0; i < 3; ++i) CHECK(a[i] == b[i]);
    CHECK(a[1] == 0x7fffu);
  }
}
