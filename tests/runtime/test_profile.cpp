// MT_PROFILE's kernel table (runtime/launch_check.h): every CUDA-path
// launch is counted and timed per kernel name while profiling is on.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

#include "runtime/launch_check.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;

namespace {

// The calls column of `kernel`'s row, or -1 when the table has no such row.
long long calls_of(const std::string& report, const std::string& kernel) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name;
    long long calls = -1;
    if (fields >> name >> calls && name == kernel) return calls;
  }
  return -1;
}

}  // namespace

TEST_CASE("the kernel profile counts each CUDA-path launch while profiling is on", "[profile]") {
  const Tensor a = ones({1000}, kF32, test::kCudaPath), b = ones({1000}, kF32, test::kCudaPath);
  kernels::profile_reset();
  kernels::set_profiling(true);
  for (int i = 0; i < 3; ++i) add(a, b);
  if (!test::kCudaPath.is_sim()) {  // cuBLASLt by name: MT_GEMM=auto would first time both back ends
    ::setenv("MT_GEMM", "cublaslt", 1);
    matmul(ones({64, 64}, kF32, test::kCudaPath), ones({64, 64}, kF32, test::kCudaPath));
    ::unsetenv("MT_GEMM");
  }
  kernels::set_profiling(false);
  add(a, b);  // not counted
  const std::string report = kernels::profile_report();
  INFO(report);
  CHECK(calls_of(report, "binary_kernel") == 3);
  // On a GPU the cuBLASLt call is a row of its own.
  if (!test::kCudaPath.is_sim()) CHECK(calls_of(report, "cublasLtMatmul") == 1);
  CHECK(report.find("total ms") != std::string::npos);
  kernels::profile_reset();
  CHECK(calls_of(kernels::profile_report(), "binary_kernel") == -1);
}

namespace {

const kernels::ProfileEntry* entry_named(const std::vector<kernels::ProfileEntry>& entries, const std::string& name) {
  for (const kernels::ProfileEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

// Catches: a launch's declared work lost (GB/s shown as '-'), attributed to
// the wrong launch (declared work must be taken by the next launch only), or
// counted with the wrong formula (an add of two f32 [1000] moves 12000 bytes;
// a 64 x 48 x 32 GEMM does 2 * 64 * 48 * 32 FLOPs and moves A, B and C once);
// the ceilings not turning rates into shares.
TEST_CASE("the kernel profile reports each kernel's bytes, FLOPs and share of the ceilings", "[profile]") {
  const Tensor a = ones({1000}, kF32, test::kCudaPath), b = ones({1000}, kF32, test::kCudaPath);
  const Tensor x = ones({64, 32}, kF32, test::kCudaPath), w = ones({32, 48}, kF32, test::kCudaPath);
  const Tensor y = empty({64, 48}, kF32, test::kCudaPath);
  kernels::profile_reset();
  kernels::set_profiling(true);
  kernels::set_profile_ceilings(1000.0, 100.0);
  for (int i = 0; i < 2; ++i) add(a, b);
  matmul(x, w);
  kernels::declare_launch_work(1e9);  // declared, then taken by the next launch: the fill below
  fill_(y, 0.0);
  kernels::set_profiling(false);
  const std::vector<kernels::ProfileEntry> entries = kernels::profile_entries();
  const std::string report = kernels::profile_report();
  INFO(report);
  const kernels::ProfileEntry* binary = entry_named(entries, "binary_kernel");
  REQUIRE(binary != nullptr);
  CHECK(binary->calls == 2);
  CHECK(binary->bytes == 2 * 3 * 1000 * 4.0);
  double gemm_flops = 0, gemm_bytes = 0;
  for (const kernels::ProfileEntry& e : entries) {
    if (e.flops > 0) {
      gemm_flops += e.flops;
      gemm_bytes += e.bytes;
    }
  }
  CHECK(gemm_flops == 2.0 * 64 * 48 * 32);
  CHECK(gemm_bytes == (64 * 32 + 32 * 48 + 64 * 48) * 4.0);
  int declared_rows = 0;
  for (const kernels::ProfileEntry& e : entries) {
    if (e.bytes >= 1e9) {
      ++declared_rows;
      CHECK(e.bytes == 1e9);
      CHECK(e.calls == 1);
    }
  }
  CHECK(declared_rows == 1);
  CHECK(report.find("GB/s") != std::string::npos);
  CHECK(report.find("%copy") != std::string::npos);
  CHECK(report.find('%', report.find("binary_kernel")) != std::string::npos);
  kernels::set_profile_ceilings(0, 0);
  kernels::profile_reset();
}
