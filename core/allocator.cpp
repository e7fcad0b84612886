#include "core/allocator.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/caching_allocator.h"
#include "core/host_scratch.h"
#include "runtime/error.h"

namespace mt {

void StatsCounter::on_allocate(size_t bytes) {
  const int64_t now = current_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocations_.fetch_add(1);
  live_.fetch_add(1);
}

void StatsCounter::on_deallocate(size_t bytes) {
  current_.fetch_sub(static_cast<int64_t>(bytes));
  live_.fetch_sub(1);
}

AllocatorStats StatsCounter::snapshot() const {
  return {current_.load(), peak_.load(), allocations_.load(), live_.load()};
}

void StatsCounter::reset_peak() { peak_.store(current_.load()); }

namespace {

// Freed large host blocks, kept for the next allocation of their size
// class. glibc hands blocks above its mmap threshold (128 KiB to 32 MiB)
// back to the kernel on free, so every training step page-faulted its large
// temporaries in again: 19% of a gpt-small bf16 step was the kernel zeroing
// fresh pages. A size class is the request rounded up to an eighth of its
// power of two (at most 12.5% unused), so the same shapes step after step
// find their blocks. Small blocks stay with malloc, which recycles them well.
// Under AddressSanitizer nothing is kept, so a use after free is still caught.
class HostBlockCache {
 public:
  static constexpr size_t kSmallest = size_t{256} << 10;  // below this, malloc's own free lists
  static constexpr size_t kMaxCached = size_t{2} << 30;   // beyond this many idle bytes, free instead

  // The bytes a request of `bytes` really takes: its size class.
  static size_t size_class(size_t bytes) {
    const size_t aligned = (bytes + 63) / 64 * 64;
    if (aligned < kSmallest) return aligned;
    size_t power = kSmallest;
    while (power < aligned) power *= 2;
    const size_t eighth = power / 8;
    return (aligned + eighth - 1) / eighth * eighth;
  }

  // A kept block of exactly `rounded` bytes, or null.
  void* take(size_t rounded) {
    if (rounded < kSmallest) return nullptr;
    std::lock_guard lock(mutex_);
    auto found = idle_.find(rounded);
    if (found == idle_.end() || found->second.empty()) return nullptr;
    void* block = found->second.back();
    found->second.pop_back();
    idle_bytes_ -= rounded;
    return block;
  }

  // Keeps a freed block; returns false when the caller must free it.
  bool keep(void* block, size_t rounded) {
    if (!kHostCacheKeepsBlocks || rounded < kSmallest) return false;
    std::lock_guard lock(mutex_);
    if (idle_bytes_ + rounded > kMaxCached) return false;
    idle_[rounded].push_back(block);
    idle_bytes_ += rounded;
    return true;
  }

  // A block for a request of `bytes`: a kept one of its size class, else a
  // fresh one (after freeing the idle blocks, if memory ran out); null when
  // even that fails.
  void* acquire(size_t bytes) {
    const size_t rounded = size_class(bytes);
    void* block = take(rounded);
    if (block == nullptr) block = std::aligned_alloc(64, rounded);
    if (block == nullptr && release() > 0) block = std::aligned_alloc(64, rounded);
    return block;
  }

  // Returns a block from acquire(bytes): kept for reuse, or freed.
  void give_back(void* block, size_t bytes) {
    if (block != nullptr && !keep(block, size_class(bytes))) std::free(block);
  }

  // Frees every kept block; returns the bytes given back.
  size_t release() {
    std::lock_guard lock(mutex_);
    const size_t released = idle_bytes_;
    for (auto& [size, blocks] : idle_) {
      for (void* block : blocks) std::free(block);
    }
    idle_.clear();
    idle_bytes_ = 0;
    return released;
  }

  size_t idle_bytes() const {
    std::lock_guard lock(mutex_);
    return idle_bytes_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> idle_;
  size_t idle_bytes_ = 0;
};

// 64-byte aligned host memory: a cache line, and enough for AVX-512 loads.
// The statistics count the bytes tensors hold, not the idle cache.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const int64_t limit = limit_.load();
    if (limit > 0 && stats_.snapshot().current_bytes + static_cast<int64_t>(bytes) > limit) {
      throw OutOfMemoryError(fmt::format(
          "out of CPU memory: asked for {} bytes with {} bytes already allocated by mixtape, over the limit of {} "
          "bytes (MT_CPU_MEMORY_LIMIT, or the memory budget of mixtape bench)",
          bytes, stats_.snapshot().current_bytes, limit));
    }
    void* ptr = cache_.acquire(bytes);
    if (ptr == nullptr) {
      const auto s = stats_.snapshot();
      throw OutOfMemoryError(fmt::format(
          "out of CPU memory: asked for {} bytes with {} bytes already allocated by mixtape", bytes, s.current_bytes));
    }
    stats_.on_allocate(bytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    cache_.give_back(ptr, bytes);
    stats_.on_deallocate(bytes);
  }
  Device device() const override { return kCPU; }
  AllocatorStats stats() const override { return stats_.snapshot(); }
  void reset_peak() override { stats_.reset_peak(); }
  int64_t set_limit(int64_t bytes) { return limit_.exchange(bytes); }
  int64_t limit() const { return limit_.load(); }
  // A kernel's temporary: the same cache, outside the tensor statistics and the limit.
  void* allocate_scratch(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* ptr = cache_.acquire(bytes);
    if (ptr == nullptr)
      throw OutOfMemoryError(fmt::format("out of CPU memory: a kernel asked for {} bytes of scratch", bytes));
    return ptr;
  }
  void free_scratch(void* ptr, size_t bytes) { cache_.give_back(ptr, bytes); }
  size_t release_cache() { return cache_.release(); }
  size_t cached_bytes() const { return cache_.idle_bytes(); }

 private:
  StatsCounter stats_;
  HostBlockCache cache_;
  std::atomic<int64_t> limit_{limit_from_environment()};

  static int64_t limit_from_environment() {
    const char* text = std::getenv("MT_CPU_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0') return 0;
    int64_t bytes = 0;
    const char* end = text + std::strlen(text);
    const auto [at, ec] = std::from_chars(text, end, bytes);
    MT_CHECK(ec == std::errc() && at == end && bytes >= 0,
             "MT_CPU_MEMORY_LIMIT must be a whole number of bytes (0 = no limit), got '{}'", text);
    return bytes;
  }
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator cpu;
  return cpu;
}

struct Registry {
  std::mutex mutex;
  Allocator* by_type[3] = {nullptr, nullptr, nullptr};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_type[static_cast<int>(type)] = allocator;
}

int64_t set_cpu_memory_limit(int64_t bytes) {
  MT_CHECK(bytes >= 0, "set_cpu_memory_limit: the limit must be >= 0 bytes (0 = none), got {}", bytes);
  return cpu_allocator().set_limit(bytes);
}
int64_t cpu_memory_limit() { return cpu_allocator().limit(); }
size_t empty_cpu_cache() { return cpu_allocator().release_cache(); }
void* allocate_cpu_scratch(size_t bytes) { return cpu_allocator().allocate_scratch(bytes); }
void free_cpu_scratch(void* ptr, size_t bytes) { cpu_allocator().free_scratch(ptr, bytes); }
size_t cpu_cached_bytes() { return cpu_allocator().cached_bytes(); }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  auto& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (Allocator* a = r.by_type[static_cast<int>(device.type)]; a != nullptr) return *a;
  }
  // Nothing registered: the caching allocators, created on first use (a
  // static registrar in a static library may never be linked in).
  if (device.is_sim()) return sim_caching_allocator();
  return cuda_caching_allocator(device.index);  // "no CUDA device available: ..." without a GPU
}

AllocatorStats memory_stats(Device device) { return allocator_for(device).stats(); }

}  // namespace mt
