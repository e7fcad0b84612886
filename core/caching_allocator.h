// The caching allocator behind the CUDA and sim devices.
//
// Asking the driver for memory (cudaMalloc) is slow and synchronising, and a
// training step allocates and frees the same activation sizes every step. So,
// like PyTorch's CUDACachingAllocator, freed blocks are kept in a pool and
// handed out again:
//
//   * sizes round up to 512 bytes; requests of at most 1 MiB ("small") are
//     carved from 2 MiB segments, requests up to 10 MiB from 20 MiB segments,
//     larger ones get a segment of their own size rounded up to 2 MiB;
//   * a cached block bigger than the request is split, and the remainder goes
//     back to the pool; on free, a block merges with free neighbours of the
//     same segment (coalescing), so the split pieces grow back;
//   * blocks remember the stream they were allocated on and are only reused
//     on that stream (a kernel still running on stream A may touch a block
//     that the host already freed; stream B must not get it before A is done);
//   * MT_CUDA_ALLOC_CONF=max_split_size_mb:N stops blocks above N MiB from
//     being split (and requests below N from taking them), which limits the
//     fragmentation big one-off tensors leave behind;
//   * on out-of-memory: release every cached (fully free) segment, retry once,
//     then throw an mt::Error with a memory summary and what to try.
//
// The memory itself comes from a BackingStore: cudaMalloc for a GPU, the host
// heap for the sim device (optionally capped, so tests can exercise OOM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace mt {

// Where segments come from.
class BackingStore {
 public:
  virtual ~BackingStore() = default;
  // nullptr when there is no memory left (never throws for out-of-memory).
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  // Free and total memory of the device, for the OOM message (total 0 = unknown).
  virtual size_t free_bytes() const = 0;
  virtual size_t total_bytes() const = 0;
  virtual std::string name() const = 0;
};

// Host memory (the sim device). capacity_bytes > 0 caps the total, like a GPU's memory.
std::unique_ptr<BackingStore> make_host_backing_store(size_t capacity_bytes = 0);

struct CachingAllocatorConfig {
  size_t max_split_size = SIZE_MAX;  // blocks above this are never split
};
// Parses "max_split_size_mb:256" (comma-separated key:value pairs); throws on unknown keys.
CachingAllocatorConfig parse_alloc_conf(const std::string& text);
// MT_CUDA_ALLOC_CONF parsed (the defaults when unset), as the sim and CUDA
// allocators read it when first made; a program may call it at start-up to
// report a bad value before any work.
CachingAllocatorConfig alloc_conf_from_environment();

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;  // in live blocks (rounded sizes)
  int64_t requested_bytes = 0;  // what callers asked for, live
  int64_t reserved_bytes = 0;   // in segments obtained from the backing store
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;  // allocate() calls
  int64_t live_blocks = 0;
  int64_t backend_mallocs = 0;  // cudaMalloc (or host) calls
  int64_t backend_frees = 0;
  int64_t cache_hits = 0;  // allocations served from the pool
  int64_t num_ooms = 0;    // backing-store failures (including ones a retry fixed)
  int64_t segments = 0;
  int64_t cached_blocks = 0;  // free blocks in the pool
  int64_t largest_free_block = 0;
  // 1 - largest free block / all free bytes: 0 when the cache is one piece.
  double fragmentation = 0;
};

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(Device device, std::unique_ptr<BackingStore> store, CachingAllocatorConfig config = {});
  ~CachingAllocator() override;

  // On the calling thread's current stream (core/stream.h).
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return device_; }
  AllocatorStats stats() const override;
  void reset_peak() override;

  // stream: an opaque id (a cudaStream_t's value; 0 = the default stream).
  void* allocate(size_t bytes, uint64_t stream);
  CachingAllocatorStats detailed_stats() const;
  // Returns every fully free segment to the backing store (except a live graph's).
  void empty_cache();

  // Memory of CUDA graphs (core/graph.h), as PyTorch's private graph pools.
  // Blocks allocated while a graph captures on `stream` come from that
  // stream's own segments, which nothing else allocates from; those segments
  // stay reserved until release_graph(), since every replay writes into them.
  // A block of another stream freed during the capture is held until then:
  // captured kernels may have used it, and replays use it again.
  void begin_graph_capture(uint64_t stream);
  void end_graph_capture();
  void release_graph(uint64_t stream);
  const CachingAllocatorConfig& config() const { return config_; }

  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = 1 << 20;    // <= 1 MiB: small pool
  static constexpr size_t kSmallSegment = 2 << 20;    // 2 MiB
  static constexpr size_t kMediumRequest = 10 << 20;  // <= 10 MiB: 20 MiB segments
  static constexpr size_t kMediumSegment = 20 << 20;
  static constexpr size_t kLargeRound = 2 << 20;

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    uint64_t stream = 0;
    bool small_pool = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Block* find_free_block(Pool& pool, size_t size, uint64_t stream);
  Block* new_segment(size_t segment_size, bool small_pool, uint64_t stream);
  void release_cached_segments();                                           // caller holds mutex_
  void free_block(std::unordered_map<void*, Block*>::iterator live_entry);  // caller holds mutex_
  [[noreturn]] void throw_out_of_memory(size_t requested, size_t segment_size);

  Device device_;
  std::unique_ptr<BackingStore> store_;
  CachingAllocatorConfig config_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> live_;
  CachingAllocatorStats stats_;
  uint64_t capturing_stream_ = 0;     // 0: no capture in progress
  std::set<uint64_t> graph_streams_;  // streams of live graphs
  std::map<uint64_t, std::vector<void*>> held_for_graph_;
};

// The allocators of the sim device and of CUDA device `index` (created on
// first use; CUDA throws "no CUDA device available: ..." without a GPU).
CachingAllocator& sim_caching_allocator();
CachingAllocator& cuda_caching_allocator(int index);
// Returns the cached blocks of the sim or CUDA device to the system (like torch.cuda.empty_cache()).
void empty_cache(Device device);

// Copies bytes between any two devices (CPU/SIM: memcpy; CUDA: cudaMemcpy).
// Between the host and a device it is a host sync; `what` names the
// operation in the count's error message.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const char* what = "a blocking copy between the host and the device");

}  // namespace mt
