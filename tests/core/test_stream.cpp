// Streams, events, synchronisation and pinned memory on the devices this
// machine has (CPU and sim; the CUDA branches run where there is a GPU).
#include <catch2/catch.hpp>

#include "core/caching_allocator.h"
#include "core/stream.h"
#include "runtime/sim/runtime.h"
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

// Catches: deferred sim streams running work before it is waited for (then a
// missing Stream::wait could never show on sim), or not running it when it
// is waited for (a correct program would read stale data).
TEST_CASE("deferred sim streams hold work until a wait, an event or the host needs it", "[stream][sim]") {
  const Stream side = Stream::create(kSIM);
  const Tensor x = zeros({4}, kF32, kSIM);
  Event added(kSIM);
  simulator::begin_deferred_streams(simulator::FlushOrder::OldestStreamFirst);
  {
    StreamGuard guard(side);
    fill_(x, 1.0);
    added.record(side);
    fill_(x, 11.0);  // after the event: not needed by a wait on it
  }
  // The default stream reads x without waiting: the fill has not run yet.
  const Tensor unordered = x.clone();
  current_stream(kSIM).wait(added);
  const Tensor ordered = x.clone();
  CHECK(unordered.to(kCPU).to_vector() == std::vector<double>(4, 0.0));
  CHECK(ordered.to(kCPU).to_vector() == std::vector<double>(4, 1.0));
  // The host's blocking read let everything land.
  CHECK(x.to(kCPU).to_vector() == std::vector<double>(4, 11.0));
  simulator::end_deferred_streams();
}

// Catches: a wait queued on a deferred stream honoured when it is queued
// rather than when the stream reaches it, or streams flushed in one fixed order.
TEST_CASE("a wait on a deferred stream runs the other stream's work when reached", "[stream][sim]") {
  for (auto order : {simulator::FlushOrder::OldestStreamFirst, simulator::FlushOrder::NewestStreamFirst}) {
    const Stream producer = Stream::create(kSIM), consumer = Stream::create(kSIM);
    const Tensor x = zeros({2}, kF32, kSIM), seen = zeros({2}, kF32, kSIM), racing = zeros({2}, kF32, kSIM);
    Event written(kSIM);
    simulator::begin_deferred_streams(order);
    {
      StreamGuard guard(producer);
      fill_(x, 5.0);
      written.record(producer);
    }
    {
      StreamGuard guard(consumer);
      copy_(racing, x);  // no wait: sees 0 when the consumer is flushed first
      consumer.wait(written);
      copy_(seen, x);
    }
    synchronize(kSIM);
    simulator::end_deferred_streams();
    CHECK(seen.to(kCPU).to_vector() == std::vector<double>{5, 5});
    const bool consumer_first = order == simulator::FlushOrder::NewestStreamFirst;
    CHECK(racing.to(kCPU).to_vector() == (consumer_first ? std::vector<double>{0, 0} : std::vector<double>{5, 5}));
  }
}
