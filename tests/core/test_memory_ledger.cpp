// The memory ledger's book-keeping: bytes per category follow allocation,
// re-filing and freeing; the breakdown at the total's peak is kept.
#include <catch2/catch.hpp>

#include "core/memory_ledger.h"
#include "core/tensor.h"

using namespace mt;

namespace {
int64_t bytes_of(Device d, MemoryCategory c) { return memory_ledger(d)[c]; }
}  // namespace

TEST_CASE("the ledger files, re-files and frees a storage's bytes (catches bytes lost or counted twice)",
          "[memory_ledger]") {
  for (Device d : {kCPU, kSIM}) {
    INFO(d.str());
    const int64_t other = bytes_of(d, MemoryCategory::Other);
    const int64_t grads = bytes_of(d, MemoryCategory::Gradients);
    const int64_t total = memory_ledger(d).total_current;
    {
      Tensor t = empty({1000}, kF32, d);
      CHECK(bytes_of(d, MemoryCategory::Other) == other + 4000);
      CHECK(memory_ledger(d).total_current == total + 4000);
      tag_memory(t, MemoryCategory::Gradients);
      CHECK(bytes_of(d, MemoryCategory::Other) == other);
      CHECK(bytes_of(d, MemoryCategory::Gradients) == grads + 4000);
      tag_memory(t.narrow(0, 0, 10), MemoryCategory::Gradients);  // a view re-files the whole storage, once
      CHECK(bytes_of(d, MemoryCategory::Gradients) == grads + 4000);
      tag_memory_if_other(t, MemoryCategory::Activations);  // already a gradient: stays one
      CHECK(t.storage()->memory_category() == MemoryCategory::Gradients);
      CHECK(bytes_of(d, MemoryCategory::Gradients) == grads + 4000);
      CHECK(memory_ledger(d).total_current == total + 4000);
    }
    CHECK(bytes_of(d, MemoryCategory::Gradients) == grads);
    CHECK(memory_ledger(d).total_current == total);
    tag_memory(Tensor(), MemoryCategory::Data);  // an undefined tensor is ignored
  }
}

TEST_CASE("a MemoryCategoryScope files what is allocated inside it, on its thread only", "[memory_ledger]") {
  const int64_t data = bytes_of(kCPU, MemoryCategory::Data);
  Tensor inside, after;
  {
    const MemoryCategoryScope scope(MemoryCategory::Data);
    inside = empty({256}, kF64);
    {
      const MemoryCategoryScope nested(MemoryCategory::Workspace);
      const Tensor scratch = empty({8}, kF32);
      CHECK(scratch.storage()->memory_category() == MemoryCategory::Workspace);
    }
    after = empty({4}, kF32);
  }
  CHECK(inside.storage()->memory_category() == MemoryCategory::Data);
  CHECK(after.storage()->memory_category() == MemoryCategory::Data);
  CHECK(bytes_of(kCPU, MemoryCategory::Data) == data + 256 * 8 + 16);
  CHECK(empty({4}, kF32).storage()->memory_category() == MemoryCategory::Other);
}

TEST_CASE("the ledger keeps the breakdown at the total's peak, and each category's own peak", "[memory_ledger]") {
  const Device d = kSIM;
  reset_memory_ledger_peak(d);
  const MemoryLedger start = memory_ledger(d);
  {
    Tensor activations = empty({1 << 10}, kF32, d);
    tag_memory(activations, MemoryCategory::Activations);
    Tensor grads = empty({1 << 9}, kF32, d);
    tag_memory(grads, MemoryCategory::Gradients);
    // The peak: 4 KiB of activations and 2 KiB of gradients. Then the
    // activations go and more gradients come, below the peak in total.
    activations = Tensor();
    Tensor more = empty({1 << 9}, kF32, d);
    tag_memory(more, MemoryCategory::Gradients);
    const MemoryLedger l = memory_ledger(d);
    const auto i = [](MemoryCategory c) { return static_cast<size_t>(c); };
    CHECK(l.total_peak == start.total_current + 6144);
    CHECK(l.at_peak[i(MemoryCategory::Activations)] == start.current[i(MemoryCategory::Activations)] + 4096);
    CHECK(l.at_peak[i(MemoryCategory::Gradients)] == start.current[i(MemoryCategory::Gradients)] + 2048);
    CHECK(l.peak[i(MemoryCategory::Gradients)] == start.current[i(MemoryCategory::Gradients)] + 4096);
    CHECK(l.reserved_unused >= 0);
  }
  CHECK(std::string(memory_category_name(MemoryCategory::OptimizerState)) == "optimizer_state");
}

TEST_CASE("a CPU memory limit refuses allocations beyond it with OutOfMemoryError", "[memory_ledger][allocator]") {
  const int64_t in_use = memory_stats(kCPU).current_bytes;
  const int64_t previous = set_cpu_memory_limit(in_use + (1 << 20));
  CHECK_NOTHROW(empty({1 << 17}, kF32));                      // 512 KiB fits
  CHECK_THROWS_AS(empty({1 << 19}, kF32), OutOfMemoryError);  // 2 MiB does not
  CHECK_THROWS_WITH(empty({1 << 19}, kF32), Catch::Contains("over the limit"));
  CHECK(cpu_memory_limit() == in_use + (1 << 20));
  set_cpu_memory_limit(previous);
  CHECK_NOTHROW(empty({1 << 19}, kF32));
  CHECK_THROWS_AS(set_cpu_memory_limit(-1), Error);
}
