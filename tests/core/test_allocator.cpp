// The caching allocator behind the cuda and sim devices, on a host backing
// store (capped where a test needs out-of-memory).
#include <catch2/catch.hpp>

#include "core/caching_allocator.h"
#include "mixtape.h"

#if defined(MT_WITH_CUDA)
#include "core/device_info.h"
#endif

using namespace mt;
using Catch::Matchers::Contains;

namespace {
constexpr size_t kMiB = 1 << 20;
CachingAllocator make_allocator(size_t capacity = 0, CachingAllocatorConfig config = {}) {
  return CachingAllocator(kSIM, make_host_backing_store(capacity), config);
}
}  // namespace

TEST_CASE("freed blocks are reused without a new backing allocation", "[allocator]") {
  auto a = make_allocator();
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  void* q = a.allocate(900);  // same 512-byte size class
  CHECK(q == p);
  const auto s = a.detailed_stats();
  CHECK(s.backend_mallocs == 1);
  CHECK(s.cache_hits == 1);
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.requested_bytes == 900);
  a.deallocate(q, 900);
}

TEST_CASE("small blocks are carved from one 2 MiB segment and coalesce back", "[allocator]") {
  auto a = make_allocator();
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) ptrs.push_back(a.allocate(100 * 1024));
  auto s = a.detailed_stats();
  CHECK(s.backend_mallocs == 1);
  CHECK(s.reserved_bytes == static_cast<int64_t>(2 * kMiB));
  CHECK(s.allocated_bytes == 8 * 100 * 1024);
  // Neighbouring blocks sit next to each other in the segment (splitting).
  CHECK(static_cast<char*>(ptrs[1]) - static_cast<char*>(ptrs[0]) == 100 * 1024);
  // Free every other block: the cache is fragmented...
  for (int i = 0; i < 8; i += 2) a.deallocate(ptrs[i], 100 * 1024);
  s = a.detailed_stats();
  CHECK(s.cached_blocks == 5);  // four holes and the segment's unused tail
  CHECK(s.largest_free_block == static_cast<int64_t>(2 * kMiB - 8 * 100 * 1024));
  CHECK(s.fragmentation == Approx(1.0 - (2048.0 - 800) / (2048.0 - 400)));
  // ...then the rest: everything merges into one free segment.
  for (int i = 1; i < 8; i += 2) a.deallocate(ptrs[i], 100 * 1024);
  s = a.detailed_stats();
  CHECK(s.cached_blocks == 1);
  CHECK(s.largest_free_block == static_cast<int64_t>(2 * kMiB));
  CHECK(s.fragmentation == 0.0);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.peak_allocated_bytes == 8 * 100 * 1024);
  a.empty_cache();
  s = a.detailed_stats();
  CHECK(s.reserved_bytes == 0);
  CHECK(s.backend_frees == 1);
}

TEST_CASE("size classes: medium requests share 20 MiB segments, large ones get their own", "[allocator]") {
  auto a = make_allocator();
  void* m1 = a.allocate(3 * kMiB);
  void* m2 = a.allocate(3 * kMiB);
  CHECK(a.detailed_stats().reserved_bytes == static_cast<int64_t>(20 * kMiB));
  void* big = a.allocate(33 * kMiB);
  CHECK(a.detailed_stats().reserved_bytes == static_cast<int64_t>(20 * kMiB + 34 * kMiB));
  CHECK(a.detailed_stats().backend_mallocs == 2);
  for (void* p : {m1, m2, big}) a.deallocate(p, 0);
  CHECK(a.detailed_stats().peak_reserved_bytes == static_cast<int64_t>(54 * kMiB));
}

TEST_CASE("blocks are only reused on the stream they were allocated on", "[allocator]") {
  auto a = make_allocator();
  void* p = a.allocate(4096, /*stream=*/1);
  a.deallocate(p, 4096);
  void* q = a.allocate(4096, /*stream=*/2);
  CHECK(q != p);
  CHECK(a.detailed_stats().backend_mallocs == 2);
  void* r = a.allocate(4096, /*stream=*/1);
  CHECK(r == p);
  a.deallocate(q, 4096);
  a.deallocate(r, 4096);
}

TEST_CASE("max_split_size_mb keeps big blocks whole", "[allocator]") {
  CHECK(parse_alloc_conf("max_split_size_mb:64").max_split_size == 64 * kMiB);
  CHECK_THROWS_WITH(parse_alloc_conf("max_split_size_mb:x"), Contains("positive integer"));
  CHECK_THROWS_WITH(parse_alloc_conf("garbage_collection:1"), Contains("unknown option"));
  auto a = make_allocator(0, parse_alloc_conf("max_split_size_mb:16"));
  void* big = a.allocate(40 * kMiB);
  a.deallocate(big, 0);
  // A 12 MiB request may not take (and split) the cached 40 MiB block.
  void* medium = a.allocate(12 * kMiB);
  CHECK(medium != big);
  CHECK(a.detailed_stats().backend_mallocs == 2);
  // A request above the limit may reuse it, unsplit.
  void* again = a.allocate(30 * kMiB);
  CHECK(again == big);
  CHECK(a.detailed_stats().allocated_bytes == static_cast<int64_t>(12 * kMiB + 40 * kMiB));
  a.deallocate(medium, 0);
  a.deallocate(again, 0);
}

TEST_CASE("out of memory frees the cache, retries, then explains", "[allocator]") {
  auto a = make_allocator(/*capacity=*/48 * kMiB);
  void* cached = a.allocate(30 * kMiB);
  a.deallocate(cached, 0);  // 30 MiB segment cached, not in use
  // 40 MiB does not fit next to the cached 30 MiB: the cache is released and the retry succeeds.
  void* p = a.allocate(40 * kMiB);
  REQUIRE(p != nullptr);
  auto s = a.detailed_stats();
  CHECK(s.num_ooms == 1);
  CHECK(s.backend_frees == 1);
  CHECK(s.reserved_bytes == static_cast<int64_t>(40 * kMiB));
  // Nothing left to free: a clear error with the numbers and what to try.
  try {
    a.allocate(20 * kMiB);
    FAIL("expected an out-of-memory error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("out of memory on sim"));
    CHECK_THAT(m, Contains("tried to allocate 20.00 MiB"));
    CHECK_THAT(m, Contains("40.00 MiB allocated"));
    CHECK_THAT(m, Contains("40.00 MiB reserved"));
    CHECK_THAT(m, Contains("8.00 MiB free"));
    CHECK_THAT(m, Contains("smaller batch"));
    CHECK_THAT(m, Contains("AMP"));
    CHECK_THAT(m, Contains("gradient accumulation"));
    CHECK_THAT(m, Contains("checkpointing"));
  }
  a.deallocate(p, 0);
}

TEST_CASE("sim tensors come from the sim caching allocator", "[allocator]") {
  auto& sim = sim_caching_allocator();
  const auto before = sim.detailed_stats();
  {
    const Tensor t = zeros({1000}, kF32, kSIM);
    CHECK(memory_stats(kSIM).current_bytes >= before.allocated_bytes + 4000);
  }
  CHECK(sim.detailed_stats().allocated_bytes == before.allocated_bytes);
  {
    const Tensor t = zeros({1000}, kF32, kSIM);  // served from the cache
  }
  CHECK(sim.detailed_stats().cache_hits > before.cache_hits);
}

TEST_CASE("asking for CUDA without a GPU is a clear error", "[allocator]") {
#if defined(MT_WITH_CUDA)
  const bool have_gpu = cuda::query_devices().count > 0;
#else
  const bool have_gpu = false;
#endif
  if (!have_gpu) {
    CHECK_THROWS_WITH(empty({2}, kF32, kCUDA), Contains("no CUDA device available"));
    CHECK_THROWS_WITH(ones({2}).to(kCUDA), Contains("no CUDA device available"));
    return;
  }
  // With a GPU: a round trip through device memory and one real kernel launch.
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4.5}, {4});
  const Tensor on_gpu = x.to(kCUDA);
  CHECK(on_gpu.device() == kCUDA);
  CHECK(on_gpu.to(kCPU).to_vector() == x.to_vector());
  CHECK(add(on_gpu, on_gpu).to(kCPU).to_vector() == std::vector<double>{2, 4, 6, 9});
  CHECK(cuda_caching_allocator(0).detailed_stats().allocated_bytes > 0);
}
