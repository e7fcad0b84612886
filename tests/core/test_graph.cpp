// CUDA-graph capture (core/graph.h) on the sim device: what a capture
// records, what it refuses, and the memory its replays rely on.
#include <catch2/catch.hpp>

#include "core/caching_allocator.h"
#include "core/graph.h"
#include "mixtape.h"

using namespace mt;
using Catch::Contains;

namespace {
std::vector<double> host_values(const Tensor& t) { return t.to(kCPU).to_vector(); }
}  // namespace

// Catches: a capture that runs the launches as it records them (the first
// replay would then be a second step), and a replay that re-runs nothing.
TEST_CASE("a captured graph runs nothing until replayed, then its work each replay", "[graph]") {
  Tensor x = zeros({4}, kF32, kSIM);
  CudaGraph graph(kSIM);
  graph.capture([&] { copy_(x, add(x, 1.0)); });
  CHECK(graph.captured());
  CHECK(graph.node_count() >= 2);  // the scalar operand's fill, the add and the copy
  CHECK(host_values(x) == std::vector<double>(4, 0.0));
  for (int i = 0; i < 3; ++i) graph.replay();
  CHECK(host_values(x) == std::vector<double>(4, 3.0));
  graph.reset();
  CHECK_FALSE(graph.captured());
  CHECK_THROWS_WITH(graph.replay(), Contains("nothing captured"));
}

// Catches: a capture that lets the host read a device value (on a GPU the
// value does not exist yet: the read returns stale memory or invalidates the
// capture), and a failed capture that leaves the capture state behind.
TEST_CASE("a host sync during capture is an error naming the operation", "[graph][host_sync]") {
  Tensor x = ones({2}, kF32, kSIM);
  CudaGraph graph(kSIM);
  CHECK_THROWS_WITH(graph.capture([&] { (void)sum(x).item<double>(); }),
                    Contains("CUDA-graph capture") && Contains("item"));
  CHECK_FALSE(graph.captured());
  // Launches run eagerly again, and the same graph can capture afterwards.
  CHECK(host_values(add(x, 1.0)) == std::vector<double>(2, 2.0));
  graph.capture([&] { copy_(x, mul(x, 3.0)); });
  graph.replay();
  CHECK(host_values(x) == std::vector<double>(2, 3.0));
}

// Catches: work queued on the default stream during a capture (a GPU
// refuses it, as the legacy default stream synchronises with the capturing
// one), and ops that bake a host-drawn random offset into the graph.
TEST_CASE("the default stream and host-side randomness are refused during capture", "[graph]") {
  Tensor x = ones({8}, kF32, kSIM);
  CudaGraph graph(kSIM);
  CHECK_THROWS_WITH(graph.capture([&] {
    const StreamGuard on_default(Stream::default_stream(kSIM));
    (void)add(x, 1.0);
  }),
                    Contains("default stream"));
  CHECK_THROWS_WITH(graph.capture([&] { (void)dropout(x, 0.5, /*training=*/true); }), Contains("dropout"));
  CHECK_FALSE(graph.captured());
}

// Catches: a caching allocator that hands a block the graph used during
// capture to a later allocation (the replay then overwrites that tensor), or
// that returns the graph's segments to the system on empty_cache().
TEST_CASE("memory a graph used is never handed out again while the graph lives", "[graph][allocator]") {
  const Tensor x = full({1024}, 2.0, kF32, kSIM);
  Tensor y = zeros({1024}, kF32, kSIM);
  Tensor before = full({1024}, 5.0, kF32, kSIM);
  CudaGraph graph(kSIM);
  graph.capture([&] {
    const Tensor scratch = add(x, 1.0);  // freed inside the capture
    copy_(y, mul(scratch, 2.0));
    before = Tensor();  // a block of the default stream, freed during capture
  });
  empty_cache(kSIM);
  // Fresh allocations of the same sizes, filled with a sentinel.
  std::vector<Tensor> others;
  for (int i = 0; i < 6; ++i) others.push_back(full({1024}, -7.0, kF32, kSIM));
  graph.replay();
  CHECK(host_values(y) == std::vector<double>(1024, 6.0));
  for (const Tensor& t : others) CHECK(host_values(t) == std::vector<double>(1024, -7.0));
  const int64_t reserved_with_graph = sim_caching_allocator().detailed_stats().reserved_bytes;
  graph.reset();
  others.clear();
  empty_cache(kSIM);
  CHECK(sim_caching_allocator().detailed_stats().reserved_bytes < reserved_with_graph);
}

// Catches: capture on a device without graphs.
TEST_CASE("graphs need a device", "[graph][errors]") { CHECK_THROWS_WITH(CudaGraph(kCPU), Contains("CPU")); }
