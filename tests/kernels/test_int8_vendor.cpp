// INT8's vendor path on the simulator (kernels/gemm/int8_vendor.cu): the
// u8 -> s8 shift, the weight's column sums and the epilogue that moves the
// s8 product back to Int8Gemm's formula, around the plain s8 loop that
// stands in for cuBLASLt there. Against the v9 rung (the same epilogue: bit
// for bit) and the CPU's exact INT8 GEMM; and how int8_gemm chooses between
// the two paths on a GPU (sim posing as one).
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/gemm/int8.h"
#include "kernels/verify/trust.h"
#include "runtime/error.h"
#include "tests/kernels/fake_gpu.h"
#include "tests/kernels/launch_count.h"

using namespace mt;
using kernels::GemmActivation;
using kernels::Int8Gemm;
using kernels::verify::CheckOutcome;
using kernels::verify::OwnFamily;
using test::launches_of;

namespace {

// A GEMM's operands on the host and on sim, full-range values.
struct Problem {
  int64_t m, n, k;
  Tensor a, b, scales, bias;  // on sim
  Tensor host_a, host_b, host_scales, host_bias;

  Problem(int64_t m_, int64_t n_, int64_t k_, unsigned seed) : m(m_), n(n_), k(k_) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
    std::uniform_real_distribution<double> scale(1e-4, 1e-2), offset(-3, 3);
    std::vector<double> av(static_cast<size_t>(m * k)), bv(static_cast<size_t>(n * k)), sv(static_cast<size_t>(n)),
        biasv(static_cast<size_t>(n));
    for (double& v : av) v = u8(gen);
    for (double& v : bv) v = s8(gen);
    for (double& v : sv) v = scale(gen);
    for (double& v : biasv) v = offset(gen);
    host_a = from_vector(av, {m, k}, kU8), host_b = from_vector(bv, {n, k}, kI8);
    host_scales = from_vector(sv, {n}), host_bias = from_vector(biasv, {n});
    a = host_a.to(kSIM), b = host_b.to(kSIM), scales = host_scales.to(kSIM), bias = host_bias.to(kSIM);
  }

  Int8Gemm gemm(bool on_sim, int32_t zero_point, GemmActivation activation) const {
    const Tensor &ta = on_sim ? a : host_a, &tb = on_sim ? b : host_b, &ts = on_sim ? scales : host_scales,
                 &tbias = on_sim ? bias : host_bias;
    return {.m = m,
            .n = n,
            .k = k,
            .a = static_cast<const uint8_t*>(ta.data_ptr()),
            .a_zero_point = zero_point,
            .b = static_cast<const int8_t*>(tb.data_ptr()),
            .scales = static_cast<const float*>(ts.data_ptr()),
            .bias = static_cast<const float*>(tbias.data_ptr()),
            .activation = activation};
  }
};

// out on sim by the vendor path, called directly.
Tensor vendor_product(const Int8Gemm& g, DType dtype) {
  const Tensor out = empty({g.m, g.n}, dtype, kSIM);
  kernels::int8_gemm_by_vendor_path(g, out);
  return out.to(kCPU);
}

Tensor v9_product(const Int8Gemm& g, DType dtype) {
  const Tensor out = empty({g.m, g.n}, dtype, kSIM);
  sim::int8_gemm_v9_mma(g, out.data_ptr(), dtype == kBF16, {});
  return out.to(kCPU);
}

}  // namespace

// Catches: the shift as a - 127 or a plain cast (every product off by a
// multiple of the column sum), the zero-point correction with the wrong
// sign or from the wrong column's sum, a weight row summed with a lane
// skipped (the shuffle tree), the stand-in reading B as [k, n], and an
// epilogue that differs from v9's (bias before scale, bf16 rounded twice):
// v9 and the vendor path must agree bit for bit, with zero points at both
// ends of the range and in between.
TEST_CASE("the INT8 vendor path on sim equals the v9 rung bit for bit and the CPU to rounding",
          "[kernels][int8][sim]") {
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{70, 44, 100}, Shape3{3, 8, 36}, Shape3{130, 36, 68}}) {
    const Problem p(s.m, s.n, s.k, static_cast<unsigned>(s.m + s.n + s.k));
    for (const int32_t z : {128, 90, 0, 255}) {
      for (const GemmActivation act : {GemmActivation::None, GemmActivation::Relu, GemmActivation::GeluErf}) {
        for (const DType dtype : {kF32, kBF16}) {
          INFO(fmt::format("[{}, {}] x [{}, {}], zero point {}, activation {}, {}", s.m, s.k, s.n, s.k, z,
                           static_cast<int>(act), dtype));
          const Int8Gemm g = p.gemm(true, z, act);
          const std::vector<double> got = vendor_product(g, dtype).to_vector();
          CHECK(got == v9_product(g, dtype).to_vector());
          const Tensor want = empty({s.m, s.n}, dtype);
          kernels::cpu::int8_gemm(p.gemm(false, z, act), want);
          const std::vector<double> cpu = want.to_vector();
          for (size_t i = 0; i < cpu.size(); ++i) {
            CHECK(got[i] == Approx(cpu[i]).margin(dtype == kBF16 ? 1e-2 : 1e-5).epsilon(dtype == kBF16 ? 8e-3 : 1e-5));
          }
        }
      }
    }
  }
}

TEST_CASE("the INT8 vendor path refuses what cuBLASLt's INT8 GEMM does not take", "[kernels][int8][sim]") {
  // Catches a shape cuBLASLt would reject (or misread) reaching it.
  const Problem p(4, 6, 8, 1);
  const Int8Gemm n_not_by_4 = p.gemm(true, 128, GemmActivation::None);
  CHECK_THROWS_WITH(vendor_product(n_not_by_4, kF32), Catch::Contains("n and k multiples of 4"));
  const Problem q(4, 8, 10, 2);
  CHECK_THROWS_WITH(vendor_product(q.gemm(true, 128, GemmActivation::None), kF32),
                    Catch::Contains("n and k multiples of 4"));
  ::setenv("MT_GEMM", "cublaslt", 1);
  const Tensor out = empty({4, 6}, kF32, kSIM);
  CHECK_THROWS_WITH(kernels::int8_gemm(n_not_by_4, out), Catch::Contains("MT_GEMM=cublaslt"));
  ::unsetenv("MT_GEMM");
}

// Catches auto on a GPU ignoring the trust rule for either path, preferring
// the rung where the verified vendor path takes the shape, or giving up
// where the rung could serve a shape the vendor path does not take.
TEST_CASE("auto on a GPU runs the verified INT8 path: cuBLASLt's where it takes the shape, else v9",
          "[kernels][int8][verify][sim]") {
  const test::FakeGpu gpu;
  const Problem fits(8, 12, 32, 3), ragged(8, 10, 32, 4);
  const Tensor out_fits = empty({8, 12}, kF32, kSIM), out_ragged = empty({8, 10}, kF32, kSIM);
  const auto run_fits = [&] { kernels::int8_gemm(fits.gemm(true, 128, GemmActivation::None), out_fits); };
  const auto run_ragged = [&] { kernels::int8_gemm(ragged.gemm(true, 128, GemmActivation::None), out_ragged); };
  CHECK_THROWS_WITH(run_fits(), Catch::Contains("mixtape info --verify"));
  gpu.store(OwnFamily::Int8Vendor, CheckOutcome::Verified);
  CHECK(launches_of("int8_vendor_epilogue_kernel", run_fits) == 1);
  CHECK_THROWS_WITH(run_ragged(), Catch::Contains("needs n and k multiples of 4"));
  gpu.store(OwnFamily::Int8Mma, CheckOutcome::Verified);
  CHECK(launches_of("int8_vendor_epilogue_kernel", run_fits) == 1);
  CHECK(launches_of("int8_gemm_v9_kernel", run_ragged) == 1);
  gpu.store(OwnFamily::Int8Vendor, CheckOutcome::Failed);
  CHECK(launches_of("int8_gemm_v9_kernel", run_fits) == 1);
  // MT_GEMM names a path: the user's explicit choice.
  ::setenv("MT_GEMM", "cublaslt", 1);
  CHECK(launches_of("int8_vendor_epilogue_kernel", run_fits) == 1);
  ::unsetenv("MT_GEMM");
}

TEST_CASE("plain sim runs the INT8 rung unless MT_GEMM asks for the vendor path", "[kernels][int8][sim]") {
  // Catches the simulator's default INT8 tests silently moving off v9.
  const Problem p(8, 12, 32, 5);
  const Tensor out = empty({8, 12}, kF32, kSIM);
  const auto run = [&] { kernels::int8_gemm(p.gemm(true, 100, GemmActivation::Relu), out); };
  CHECK(launches_of("int8_gemm_v9_kernel", run) == 1);
  ::setenv("MT_GEMM", "cublaslt", 1);
  CHECK(launches_of("int8_vendor_epilogue_kernel", run) == 1);
  CHECK(launches_of("int8_s8_gemm_stand_in_kernel", run) == 1);
  ::unsetenv("MT_GEMM");
}
