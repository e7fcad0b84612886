// Internal: the shared-memory race checker (MT_SIM_RACECHECK=1).
//
// Every load and store in simulator-built kernel code is instrumented by the
// compiler (-fsanitize=thread codegen, with our own tiny runtime in
// racecheck.cpp instead of libtsan), so the checker sees each access with its
// address and size. It keeps, per byte of shared memory, the last writer and
// recent readers since the last __syncthreads(). Two accesses by different
// threads to one byte, at least one a write, with no barrier between them —
// and, for two lanes of one warp, no warp-synchronous op covering both — is a
// race.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/sim/runtime.h"

namespace mt::simulator::detail {

class RaceChecker {
 public:
  RaceChecker(const KernelLaunch& launch, uint3 block_index, const std::byte* dynamic_base, std::size_t dynamic_size);

  // An access by thread `linear_thread` (index within the block).
  void on_access(unsigned linear_thread, std::uintptr_t address, std::size_t bytes, bool is_write);
  void on_barrier();
  void on_warp_sync(unsigned warp, unsigned mask);

 private:
  struct Access {
    int thread = -1;
    std::uint64_t sequence = 0;  // warp-op sequence number at the time of the access
  };
  struct ByteHistory {
    Access writer;
    Access readers[2];
  };
  struct WarpSync {
    std::uint64_t sequence;
    unsigned warp;
    unsigned mask;
  };

  bool is_shared(std::uintptr_t address) const;
  bool ordered(const Access& earlier, unsigned later_thread) const;
  void report(const char* kind, const Access& earlier, unsigned later_thread, std::uintptr_t address);
  uint3 thread_index(unsigned linear) const;

  const KernelLaunch& launch_;
  uint3 block_index_;
  std::uintptr_t dynamic_begin_, dynamic_end_;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> tls_ranges_;  // static __shared__ lives here
  std::unordered_map<std::uintptr_t, ByteHistory> bytes_;
  std::vector<WarpSync> warp_syncs_;
  std::uint64_t sequence_ = 0;
  std::unordered_set<std::uintptr_t> reported_;
};

// The checker of the block running on this OS thread, or null when off.
extern thread_local RaceChecker* current_race_checker;
extern thread_local unsigned current_linear_thread;
// Quick global switch tested by every instrumented access.
extern bool racecheck_active;

void publish_race_report(RaceReport report);

}  // namespace mt::simulator::detail
