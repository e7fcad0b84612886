// The CPU allocator's cache of freed large blocks (core/allocator.h): large
// temporaries come back from it instead of being page-faulted in again each
// training step, while the statistics keep counting the bytes tensors hold.
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "core/host_scratch.h"
#include "mixtape.h"

using namespace mt;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}  // namespace

TEST_CASE("a freed large CPU block is reused by the next request of its size class (page-fault bug)",
          "[allocator][cpu]") {
  if (!kHostCacheKeepsBlocks) return;  // AddressSanitizer's build keeps nothing
  empty_cpu_cache();
  Allocator& cpu = allocator_for(kCPU);
  void* first = cpu.allocate(3 * kMiB + 100);
  cpu.deallocate(first, 3 * kMiB + 100);
  CHECK(cpu_cached_bytes() >= 3 * kMiB);
  void* second = cpu.allocate(3 * kMiB + 4000);  // same class: 3 MiB rounded up to 1/8 of 4 MiB
  CHECK(second == first);
  CHECK(cpu_cached_bytes() == 0);
  cpu.deallocate(second, 3 * kMiB + 4000);
  CHECK(empty_cpu_cache() >= 3 * kMiB);
  CHECK(cpu_cached_bytes() == 0);
}

TEST_CASE("the CPU statistics count the bytes tensors hold, not the idle cache (ledger bug)", "[allocator][cpu]") {
  const AllocatorStats before = memory_stats(kCPU);
  {
    const Tensor big = empty({2 * 1024 * 1024}, kF32, kCPU);  // 8 MiB
    CHECK(memory_stats(kCPU).current_bytes == before.current_bytes + static_cast<int64_t>(8 * kMiB));
  }
  CHECK(memory_stats(kCPU).current_bytes == before.current_bytes);
  CHECK(memory_stats(kCPU).live_blocks == before.live_blocks);
  empty_cpu_cache();
}

TEST_CASE("small CPU blocks are left to malloc and never kept", "[allocator][cpu]") {
  empty_cpu_cache();
  Allocator& cpu = allocator_for(kCPU);
  void* p = cpu.allocate(4096);
  cpu.deallocate(p, 4096);
  CHECK(cpu_cached_bytes() == 0);
}

TEST_CASE("the CPU memory limit still refuses live bytes over it with blocks cached", "[allocator][cpu]") {
  const int64_t before = set_cpu_memory_limit(memory_stats(kCPU).current_bytes + static_cast<int64_t>(4 * kMiB));
  { const Tensor kept = empty({1024 * 1024}, kF32, kCPU); }  // 4 MiB, now idle in the cache
  CHECK_THROWS_AS(empty({2 * 1024 * 1024}, kF32, kCPU), OutOfMemoryError);
  set_cpu_memory_limit(before);
  empty_cpu_cache();
}
