// Allocators and their per-device statistics.
//
// Every byte a tensor owns comes from an Allocator so memory can be
// accounted: current and peak bytes per device (the memory-ledger issue adds
// categories; the CUDA caching allocator adds reserved/fragmentation figures).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace mt {

struct AllocatorStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // number of allocate() calls ever made
  int64_t live_blocks = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// Thread-safe statistics counter shared by allocator implementations.
class StatsCounter {
 public:
  void on_allocate(size_t bytes);
  void on_deallocate(size_t bytes);
  AllocatorStats snapshot() const;
  void reset_peak();

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> live_{0};
};

// The allocator that owns memory on `device` (CPU today; CUDA/SIM register theirs).
Allocator& allocator_for(Device device);
void register_allocator(DeviceType type, Allocator* allocator);

// A cap on the bytes the CPU allocator hands out (0: none), beyond which an
// allocation throws OutOfMemoryError as a full GPU would: `mixtape bench`
// caps it at its memory budget, and MT_CPU_MEMORY_LIMIT (bytes) sets it at
// start-up. Returns the previous cap.
int64_t set_cpu_memory_limit(int64_t bytes);
int64_t cpu_memory_limit();

// The CPU allocator keeps freed blocks of 256 KiB and more for reuse (up to
// 2 GiB idle; none under AddressSanitizer), as the CUDA caching allocator
// does, so a step's large temporaries are not page-faulted in again every
// step. The statistics above count the bytes tensors hold; these are the
// idle ones. empty_cpu_cache() frees them (as torch.cuda.empty_cache())
// and returns how many bytes it gave back.
size_t empty_cpu_cache();
size_t cpu_cached_bytes();

// Shorthand for allocator_for(device).stats().
AllocatorStats memory_stats(Device device = kCPU);

}  // namespace mt
