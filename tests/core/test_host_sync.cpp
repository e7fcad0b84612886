// The host-sync counter (core/host_sync.h): what it counts and what it must not.
#include <catch2/catch.hpp>

#include "core/host_sync.h"
#include "core/stream.h"
#include "mixtape.h"

using namespace mt;
using Catch::Contains;

namespace {
int64_t syncs_of(const std::function<void()>& fn) {
  const int64_t before = host_sync_count();
  fn();
  return host_sync_count() - before;
}
}  // namespace

// Catches: a device factory that builds its values on the host and copies
// them over (a blocking cudaMemcpy per zeros/ones/full on a GPU), and a
// counter that misses item() on the sim device (where the read is a plain
// memory access, so nothing else would notice).
TEST_CASE("device fills are kernels, item(), reads and blocking copies are counted syncs", "[host_sync]") {
  Tensor z, o, f;
  CHECK(syncs_of([&] {
          z = zeros({3, 5}, kF16, kSIM);
          o = ones({7}, kI64, kSIM);
          f = full({2, 2}, -2.5, kBF16, kSIM);
        }) == 0);
  CHECK(z.to(kCPU).to_vector() == std::vector<double>(15, 0.0));
  CHECK(o.to(kCPU).to_vector() == std::vector<double>(7, 1.0));
  CHECK(f.to(kCPU).to_vector() == std::vector<double>(4, -2.5));
  CHECK(full({3}, 65520.0, kF16, kSIM).to(kCPU).to_vector() == std::vector<double>(3, INFINITY));  // rounds as a cast
  CHECK(syncs_of([&] { (void)f.reshape({4}).select(0, 1).item<double>(); }) == 1);
  CHECK(syncs_of([&] { (void)f.to(kCPU); }) == 1);
  CHECK(syncs_of([&] { (void)arange(0, 4).to(kSIM); }) == 1);
  CHECK(syncs_of([&] { synchronize(kSIM); }) == 1);
  // The CPU never waits for anything.
  CHECK(syncs_of([&] { (void)sum(ones({3})).item<double>(); }) == 0);
  // Ops on device tensors queue kernels only.
  CHECK(syncs_of([&] { (void)add(mul(o.to(kF32), 3.0), sum(f.reshape({4}))); }) == 0);
}

// Catches: an asynchronous copy from pageable memory passed off as sync-free
// (the driver stages it and the host waits).
TEST_CASE("copy_async is sync-free only from pinned memory", "[host_sync]") {
  const Stream stream = current_stream(kSIM);
  const Tensor dst = empty({4}, kF32, kSIM);
  const Tensor pinned = empty_pinned({4}, kF32);
  for (int i = 0; i < 4; ++i) pinned.data<float>()[i] = static_cast<float>(i);
  CHECK(syncs_of([&] { copy_async(dst, pinned, stream); }) == 0);
  CHECK(dst.to(kCPU).to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(syncs_of([&] { copy_async(dst, arange(0, 4), stream); }) == 1);
  REQUIRE_THROWS_WITH(copy_async(empty({3}, kF32, kSIM), pinned, stream), Contains("one shape"));
}

// Catches: a region that forbids syncs (CUDA-graph capture) letting one through silently.
TEST_CASE("ForbidHostSyncs turns a sync into an error naming the operation", "[host_sync]") {
  const Tensor x = ones({2}, kF32, kSIM);
  {
    ForbidHostSyncs guard("CUDA-graph capture");
    (void)mul(x, 2.0);  // kernels are fine
    REQUIRE_THROWS_WITH(sum(x).item<double>(), Contains("CUDA-graph capture") && Contains("item()"));
    REQUIRE_THROWS_WITH(synchronize(kSIM), Contains("synchronize"));
    (void)sum(ones({2})).item<double>();  // CPU tensors do not sync
  }
  CHECK_NOTHROW(sum(x).item<double>());
}
