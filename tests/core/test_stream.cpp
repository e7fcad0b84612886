// Streams, events, synchronisation and pinned memory on the devices this
// machine has (CPU and sim; the CUDA branches run where there is a GPU).
#include <catch2/catch.hpp>

#include "core/caching_allocator.h"
#include "core/stream.h"
#include "mixtape.h"

using namespace mt;

TEST_CASE("streams are per device and thread, StreamGuard sets and restores the current one", "[stream]") {
  CHECK(current_stream(kSIM) == Stream::default_stream(kSIM));
  const Stream a = Stream::create(kSIM), b = Stream::create(kSIM);
  CHECK(a.id() != b.id());
  CHECK(a.id() != 0);
  {
    StreamGuard guard(a);
    CHECK(current_stream(kSIM) == a);
    CHECK(current_stream(kCPU) == Stream::default_stream(kCPU));
    {
      StreamGuard inner(b);
      CHECK(current_stream(kSIM) == b);
    }
    CHECK(current_stream(kSIM) == a);
    // Ops run on the current stream and still give the CPU's answer.
    const Tensor x = arange(0, 8).to(kSIM);
    CHECK(mul(x, 2.0).to(kCPU).to_vector() == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14});
    a.synchronize();
  }
  CHECK(current_stream(kSIM) == Stream::default_stream(kSIM));
  synchronize(kSIM);
  synchronize(kCPU);
}

TEST_CASE("a block freed on one stream is not handed to another", "[stream][allocator]") {
  const Stream a = Stream::create(kSIM), b = Stream::create(kSIM);
  void* first = nullptr;
  {
    StreamGuard guard(a);
    const Tensor t = empty({1024}, kF32, kSIM);
    first = t.data_ptr();
  }
  {
    StreamGuard guard(b);
    const Tensor t = empty({1024}, kF32, kSIM);
    CHECK(t.data_ptr() != first);  // a's block may still be in use by a's kernels
  }
  StreamGuard guard(a);
  const Tensor again = empty({1024}, kF32, kSIM);
  CHECK(again.data_ptr() == first);  // reused on its own stream
}

TEST_CASE("events order and time work on a stream", "[stream]") {
  Event start(kSIM), end(kSIM);
  const Stream s = Stream::create(kSIM);
  start.record(s);
  const Tensor x = randn({64, 64}, kF32, kSIM);
  matmul(x, x);
  end.record(s);
  end.synchronize();
  CHECK(start.elapsed_ms(end) >= 0.0);
  Event unrecorded(kSIM);
  REQUIRE_THROWS_WITH(unrecorded.elapsed_ms(end), Catch::Contains("recorded"));
}

TEST_CASE("pinned staging memory holds a CPU tensor and moves to a device", "[stream][pinned]") {
  const Tensor p = empty_pinned({3, 4});
  CHECK(p.device() == kCPU);
  CHECK(&p.storage()->allocator() == &pinned_host_allocator());
  copy_(p, full({3, 4}, 2.5));
  CHECK(p.to(kSIM).to(kCPU).to_vector() == std::vector<double>(12, 2.5));
  const int64_t before = pinned_host_allocator().stats().current_bytes;
  { const Tensor q = empty_pinned({256}); CHECK(pinned_host_allocator().stats().current_bytes == before + 1024); }
  CHECK(pinned_host_allocator().stats().current_bytes == before);
  if (!pinned_memory_available()) WARN("no GPU: pinned memory falls back to ordinary host memory here");
}
