#include "core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>

#include "core/caching_allocator.h"
#include "core/error.h"

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
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded);
    if (ptr == nullptr) {
      const auto s = stats_.snapshot();
      fail("out of CPU memory: asked for {} bytes with {} bytes already allocated by mixtape", bytes, s.current_bytes);
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

 private:
  StatsCounter stats_;
};

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

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
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
