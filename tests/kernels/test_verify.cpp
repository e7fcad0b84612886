// Verified-only defaults (kernels/verify): every family's known-answer check
// passes on the simulator, and on a device that stands for a GPU
// (MT_SIM_GPU_IDENTITY) `auto` runs an own family only once the results
// cache says it passed there.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/fp8/fp8.h"
#include "kernels/gemm/int8.h"
#include "kernels/gemm/matmul.h"
#include "kernels/verify/checks.h"
#include "kernels/verify/trust.h"
#include "mixtape.h"
#include "runtime/error.h"
#include "test_util.h"
#include "tests/kernels/fake_gpu.h"
#include "tests/kernels/launch_count.h"

using namespace mt;
using namespace mt::kernels::verify;
using namespace mt::test;

namespace {

Tensor f32_product_on_sim() {
  const Tensor a = randn64({3, 40, 24}, 1).to(kF32), b = randn64({3, 24, 16}, 2).to(kF32);
  const Tensor out = empty({3, 40, 16}, kF32, kSIM), want = empty({3, 40, 16});
  kernels::bmm(a.to(kSIM), b.to(kSIM), out);
  kernels::bmm(a, b, want);
  check_close(out.to(kCPU), want, 1e-5, "the product on sim");
  return out;
}

}  // namespace

TEST_CASE("every own kernel family passes its known-answer check on the simulator", "[verify]") {
  // Catches a check that compares the wrong outputs (or a broken rung: CI's
  // sim is where `mixtape info --verify` must say "verified" for all).
  for (const OwnFamilyInfo& f : own_families()) {
    const CheckResult r = run_check(f.family, kSIM);
    INFO(f.name << ": " << r.detail);
    CHECK(r.outcome == CheckOutcome::Verified);
  }
}

TEST_CASE("plain sim trusts every family and a fake GPU only what its cache verified", "[verify]") {
  // Catches `auto` running an own kernel on a GPU with no cache entry.
  CHECK(own_family_trusted(OwnFamily::GemmV7, kSIM));
  CHECK(own_family_trusted(OwnFamily::GemmV3, kCPU));
  const FakeGpu gpu;
  for (const OwnFamilyInfo& f : own_families()) CHECK_FALSE(own_family_trusted(f.family, kSIM));
  gpu.store(OwnFamily::GemmV3, CheckOutcome::Verified);
  gpu.store(OwnFamily::GemmV5, CheckOutcome::Failed);
  gpu.store(OwnFamily::AttentionV3, CheckOutcome::TimedOut);
  CHECK(own_family_trusted(OwnFamily::GemmV3, kSIM));
  CHECK_FALSE(own_family_trusted(OwnFamily::GemmV5, kSIM));
  CHECK_FALSE(own_family_trusted(OwnFamily::AttentionV3, kSIM));
  CHECK_FALSE(own_family_trusted(OwnFamily::GemmV2, kSIM));
  // The results hold for that chip, driver and build only.
  ::setenv("MT_SIM_GPU_IDENTITY", "NVIDIA H200;9.0;13010", 1);
  forget_trust();
  CHECK_FALSE(own_family_trusted(OwnFamily::GemmV3, kSIM));
}

TEST_CASE("a family the chip cannot run is never trusted whatever the cache says", "[verify]") {
  const FakeGpu gpu("NVIDIA A100;8.0;13000");
  gpu.store(OwnFamily::GemmV7, CheckOutcome::Verified);  // v7 is sm_90 only
  CHECK_FALSE(own_family_trusted(OwnFamily::GemmV7, kSIM));
  CHECK(run_check(OwnFamily::GemmV7, kSIM).outcome == CheckOutcome::NotApplicable);
}

TEST_CASE("a results file mixtape did not write is ignored and never trusted", "[verify]") {
  // Catches a hostile or truncated cache turning unverified kernels on.
  const FakeGpu gpu;
  std::filesystem::create_directories(gpu.cache_dir);
  const std::string key = gpu.identity().key();
  const std::string bad_files[] = {
      "not json",
      R"({"format": "mixtape-kernel-checks-1", "devices": {")" + key +
          R"(": {"gemm.v3": {"outcome": "yes", "seconds": 1}}}})",
      R"({"format": "mixtape-kernel-checks-1", "devices": {")" + key +
          R"(": {"gemm.v99": {"outcome": "verified", "seconds": 1}}}})",
      R"({"format": "other", "devices": {")" + key + R"(": {"gemm.v3": {"outcome": "verified", "seconds": 1}}}})",
      R"({"format": "mixtape-kernel-checks-1", "devices": {")" + key + R"(": {"gemm.v3": {"outcome": "verified"}}}})",
  };
  for (const std::string& text : bad_files) {
    std::ofstream(check_cache_file()) << text;
    forget_trust();
    INFO(text);
    CHECK_FALSE(own_family_trusted(OwnFamily::GemmV3, kSIM));
  }
  gpu.store(OwnFamily::GemmV3, CheckOutcome::Verified);  // replaces the bad file
  CHECK(own_family_trusted(OwnFamily::GemmV3, kSIM));
}

TEST_CASE("a malformed MT_SIM_GPU_IDENTITY is an error", "[verify]") {
  for (const char* bad : {"H200", "H200;9;13000", "H200;9.0;x", ";9.0;13000", "H200;9.0;13000;1"}) {
    const FakeGpu gpu(bad);
    INFO(bad);
    CHECK_THROWS_AS(identity_for(kSIM), Error);
  }
}

TEST_CASE("an unverified GEMM rung is not run by auto and the reference rung serves instead", "[verify]") {
  // Catches the dispatcher ignoring the trust rule (the GPU would run v3 untested).
  const FakeGpu gpu;
  CHECK(launches_of("gemm_v3_kernel", f32_product_on_sim) == 0);
  CHECK(launches_of("gemm_v1_kernel", f32_product_on_sim) == 1);
  gpu.store(OwnFamily::GemmV3, CheckOutcome::Verified);
  CHECK(launches_of("gemm_v3_kernel", f32_product_on_sim) == 1);
  // MT_GEMM=own is the user's explicit choice.
  gpu.store(OwnFamily::GemmV3, CheckOutcome::Failed);
  ::setenv("MT_GEMM", "own", 1);
  CHECK(launches_of("gemm_v3_kernel", f32_product_on_sim) == 1);
  ::unsetenv("MT_GEMM");
  CHECK(launches_of("gemm_v3_kernel", f32_product_on_sim) == 0);
}

TEST_CASE("unverified attention rungs give way to the reference path", "[verify]") {
  const FakeGpu gpu;
  const Tensor q = randn64({1, 2, 16, 64}, 3).to(kF16).to(kSIM), k = randn64({1, 2, 16, 64}, 4).to(kF16).to(kSIM),
               v = randn64({1, 2, 16, 64}, 5).to(kF16).to(kSIM);
  AttentionOptions causal;
  causal.is_causal = true;
  const auto attend = [&] { scaled_dot_product_attention(q, k, v, causal); };
  CHECK(launches_of("attention_v3_forward", attend) == 0);
  gpu.store(OwnFamily::AttentionV3, CheckOutcome::Verified);
  CHECK(launches_of("attention_v3_forward", attend) == 0);  // v3 also needs v2 (its fallback for unaligned views)
  gpu.store(OwnFamily::AttentionV2, CheckOutcome::Verified);
  CHECK(launches_of("attention_v3_forward", attend) == 1);
}

TEST_CASE("the INT8 rung unverified on a GPU is an error that says how to verify it", "[verify]") {
  const FakeGpu gpu;
  const Tensor a = full({4, 32}, 130, kU8, kSIM), b = full({8, 32}, 1, kI8, kSIM), scales = full({8}, 0.5f, kF32, kSIM);
  const Tensor out = empty({4, 8}, kF32, kSIM);
  kernels::Int8Gemm g{.m = 4, .n = 8, .k = 32, .a_zero_point = 128};
  g.a = static_cast<const uint8_t*>(a.data_ptr());
  g.b = static_cast<const int8_t*>(b.data_ptr());
  g.scales = static_cast<const float*>(scales.data_ptr());
  try {
    kernels::int8_gemm(g, out);
    FAIL("an unverified INT8 rung ran");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("mixtape info --verify") != std::string::npos);
  }
  gpu.store(OwnFamily::Int8Mma, CheckOutcome::Verified);
  kernels::int8_gemm(g, out);
  CHECK(out.to(kCPU).to_vector()[0] == 32.0);  // 32 x (130 - 128) x 1 x 0.5
}

TEST_CASE("the FP8 kernels unverified on a GPU are an error that says how to verify them", "[verify]") {
  const FakeGpu gpu;
  const Tensor x = full({4, 8}, 3.0, kF32, kSIM), amax = empty({}, kF32, kSIM);
  try {
    kernels::fp8_amax(x, amax);
    FAIL("an unverified FP8 kernel ran");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("mixtape info --verify") != std::string::npos);
  }
  gpu.store(OwnFamily::Fp8, CheckOutcome::Verified);
  kernels::fp8_amax(x, amax);
  CHECK(amax.to(kCPU).item<float>() == 3.0f);
}
