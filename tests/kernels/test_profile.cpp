// MT_PROFILE's kernel table (kernels/cuda/launch_check.h): every CUDA-path
// launch is counted and timed per kernel name while profiling is on.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "kernels/cuda/launch_check.h"
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
  if (!test::kCudaPath.is_sim()) matmul(ones({64, 64}, kF32, test::kCudaPath), ones({64, 64}, kF32, test::kCudaPath));
  kernels::set_profiling(false);
  add(a, b);  // not counted
  const std::string report = kernels::profile_report();
  INFO(report);
  CHECK(calls_of(report, "binary_kernel") == 3);
  // On a GPU the cuBLASLt call (MT_GEMM=auto) is a row of its own.
  if (!test::kCudaPath.is_sim()) CHECK(calls_of(report, "cublasLtMatmul") == 1);
  CHECK(report.find("total ms") != std::string::npos);
  kernels::profile_reset();
  CHECK(calls_of(kernels::profile_report(), "binary_kernel") == -1);
}
