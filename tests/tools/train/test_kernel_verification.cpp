// The own kernels' checks in child processes (tools/train/kernel_verification.h):
// a hang becomes "timed out", a crash or garbage "failed", and the results
// reach the cache that decides what `auto` runs.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/verify/trust.h"
#include "tests/kernels/fake_gpu.h"
#include "tools/train/kernel_verification.h"

using namespace mt;
using namespace mt::kernels::verify;
using mt::tools::check_in_child;
using mt::tools::run_child;

TEST_CASE("a child that hangs is killed at the time limit", "[verify]") {
  // Catches a hung kernel hanging the training process that checks it.
  const auto start = std::chrono::steady_clock::now();
  const tools::ChildOutput child = run_child({"/bin/sleep", "30"}, 0.5);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(child.timed_out);
  CHECK(seconds < 10);
}

TEST_CASE("a child's output and how it ended are reported", "[verify]") {
  const tools::ChildOutput echo = run_child({"/bin/echo", "a line"}, 10);
  CHECK_FALSE(echo.timed_out);
  CHECK(echo.exit_status == 0);
  CHECK(echo.out == "a line\n");
  const tools::ChildOutput crash = run_child({"/bin/sh", "-c", "kill -SEGV $$"}, 10);
  CHECK(crash.exit_status == 128 + 11);
}

TEST_CASE("a check whose child prints no result or crashes or hangs does not pass", "[verify]") {
  // Catches a garbled or missing reply read as "verified".
  CHECK(check_in_child(OwnFamily::GemmV3, kSIM, {.timeout_seconds = 10, .executable = "/bin/echo"}).outcome ==
        CheckOutcome::Failed);
  CHECK(check_in_child(OwnFamily::GemmV3, kSIM, {.timeout_seconds = 10, .executable = "/bin/false"}).outcome ==
        CheckOutcome::Failed);
  const std::filesystem::path hang =
      std::filesystem::temp_directory_path() / ("mt_hanging_check_" + std::to_string(::getpid()));
  std::ofstream(hang) << "#!/bin/sh\nexec sleep 30\n";
  std::filesystem::permissions(hang, std::filesystem::perms::owner_all);
  const CheckResult hung = check_in_child(OwnFamily::GemmV3, kSIM, {.timeout_seconds = 0.5, .executable = hang});
  std::filesystem::remove(hang);
  CHECK(hung.outcome == CheckOutcome::TimedOut);
  CHECK(hung.detail == "timed out after 0.5 s (killed)");
}

TEST_CASE("a training process verifies what the cache lacks once in children and auto then trusts it", "[verify]") {
  const test::FakeGpu gpu("NVIDIA H100 80GB HBM3;9.0;12080");
  for (const OwnFamilyInfo& f : own_families()) CHECK_FALSE(own_family_trusted(f.family, kSIM));
  tools::verify_missing_families(kSIM, {.timeout_seconds = 60, .executable = MT_CLI_PATH});
  const auto results = cached_results(*identity_for(kSIM));
  CHECK(results.size() == own_families().size());
  for (const OwnFamilyInfo& f : own_families()) {
    INFO(f.name);
    CHECK(results.at(f.family).outcome == CheckOutcome::Verified);
    CHECK(own_family_trusted(f.family, kSIM));
  }
  // A second process start finds them all: no child runs (an executable
  // that could not answer would store "failed").
  tools::verify_missing_families(kSIM, {.timeout_seconds = 60, .executable = "/bin/false"});
  CHECK(cached_results(*identity_for(kSIM)).at(OwnFamily::GemmV3).outcome == CheckOutcome::Verified);
}
