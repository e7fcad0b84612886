// The CPU's f16 conversions eight lanes at a time (kernels/common/f16x8.h,
// used by every gather, scatter and cast between f32 and f16) must give the
// bits runtime/half.h's scalar conversions give: the simulator and the GPU
// kernels are checked against those.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "kernels/common/f16x8.h"
#include "runtime/half.h"

using namespace mt;

#if defined(__F16C__) && defined(__AVX2__)
// Catches: vcvtph2ps's quieted NaN kept (a signalling NaN's payload would
// change), a sign lost in the rebuilt NaN lanes.
TEST_CASE("f16x8 widens every f16 bit pattern as f16_bits_to_f32", "[cpu][f16]") {
  int mismatches = 0;
  for (uint32_t first = 0; first < 65536; first += 8) {
    Half in[8];
    for (uint32_t i = 0; i < 8; ++i) in[i] = Half::from_bits(static_cast<uint16_t>(first + i));
    alignas(32) float out[8];
    _mm256_store_ps(out, kernels::cpu::widen_f16x8(in));
    for (uint32_t i = 0; i < 8; ++i) {
      if (float_bits(out[i]) != float_bits(f16_bits_to_f32(in[i].bits))) {
        UNSCOPED_INFO("f16 bits " << std::hex << first + i);
        ++mismatches;
      }
    }
  }
  CHECK(mismatches == 0);
}

// Catches: ties rounded away from even, 65520 kept finite, subnormals
// flushed to zero, a NaN's payload kept instead of the canonical 0x7fff, and
// the lane order of the 32-to-16-bit pack of the NaN mask.
TEST_CASE("f16x8 rounds f32 to f16 as f32_to_f16_bits, edges and a sweep of bit patterns", "[cpu][f16]") {
  std::vector<uint32_t> cases = {
      0x477fe000u,                                                      // 65504, the largest f16
      0x477fefffu,                                                      // just under 65520: 65504
      0x477ff000u,                                                      // 65520: inf
      0xc77ff000u,                                                      // -65520: -inf
      0x3f801000u,                                                      // 1 + 2^-11: a tie, to even (1)
      0x3f803000u,                                                      // 1 + 3 * 2^-11: a tie, to even (1 + 2^-9)
      0x38800000u,                                                      // 2^-14, the smallest normal
      0x387fe000u,                                                      // just under it: a subnormal
      0x33800000u,                                                      // 2^-24, the smallest subnormal
      0x33000000u,                                                      // 2^-25: ties to 0
      0x33000001u,                                                      // just over: 2^-24
      0x33c00000u,                                                      // 1.5 * 2^-24: a tie, to even (2^-23)
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff812345u,  // NaNs of either sign and payload
      0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u};
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65521) cases.push_back(static_cast<uint32_t>(bits));
  while (cases.size() % 8 != 0) cases.push_back(0x3f800000u);
  int mismatches = 0;
  for (size_t first = 0; first < cases.size(); first += 8) {
    float in[8];
    for (size_t i = 0; i < 8; ++i) in[i] = bits_float(cases[first + i]);
    Half out[8];
    kernels::cpu::narrow_f16x8(in, out);
    for (size_t i = 0; i < 8; ++i) {
      if (out[i].bits != f32_to_f16_bits(in[i])) {
        UNSCOPED_INFO("f32 bits " << std::hex << cases[first + i]);
        ++mismatches;
      }
    }
  }
  CHECK(mismatches == 0);
}
#endif

// Through the tensor casts (contiguous, and a strided view's runs), with a
// length that leaves a scalar tail. Catches a tail left unconverted or
// converted from the wrong offset, whatever the lanes do.
TEST_CASE("f32 <-> f16 casts equal the scalar conversions at every offset", "[cpu][f16]") {
  std::vector<float> values(8 * 37 + 5);  // from f16 subnormals to past its range (inf), no NaN
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = bits_float(static_cast<uint32_t>(0x34000000u + i * 0x9e3779u % 0x14000000u));
  const Tensor x =
      from_vector(std::vector<double>(values.begin(), values.end()), {static_cast<int64_t>(values.size())}, kF32);
  const Tensor h = x.to(kF16);
  const uint16_t* hp = static_cast<const uint16_t*>(h.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) REQUIRE(hp[i] == f32_to_f16_bits(values[i]));
  const Tensor back = h.to(kF32);
  const float* bp = static_cast<const float*>(back.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) REQUIRE(float_bits(bp[i]) == float_bits(f16_bits_to_f32(hp[i])));
  // A strided view: rows of 21 (runs with a tail), every other row.
  const Tensor rows = h.narrow(0, 0, 21 * 14).reshape({14, 21}).slice(0, 0, 14, 2);
  const std::vector<double> seen = rows.to(kF32).to_vector();
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c = 0; c < 21; ++c) {
      REQUIRE(seen[static_cast<size_t>(r * 21 + c)] == f16_bits_to_f32(hp[(2 * r) * 21 + c]));
    }
  }
}
