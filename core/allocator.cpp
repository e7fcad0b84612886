#include "core/allocator.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "core/caching_allocator.h"
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

// 64-byte aligned host memory: a cache line, and enough for AVX-512 loads.
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
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded);
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
    std::free(ptr);
    stats_.on_deallocate(bytes);
  }
  Device device() const override { return kCPU; }
  AllocatorStats stats() const override { return stats_.snapshot(); }
  void reset_peak() override { stats_.reset_peak(); }
  int64_t set_limit(int64_t bytes) { return limit_.exchange(bytes); }
  int64_t limit() const { return limit_.load(); }

 private:
  StatsCounter stats_;
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
