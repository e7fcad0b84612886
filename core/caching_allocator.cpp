#include "core/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/host_sync.h"
#include "core/stream.h"
#include "runtime/error.h"
#include "runtime/sim/runtime.h"

#if defined(MT_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/device_info.h"
#endif

namespace mt {
namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[unit]);
}

class HostBackingStore final : public BackingStore {
 public:
  explicit HostBackingStore(size_t capacity) : capacity_(capacity) {}
  void* raw_allocate(size_t bytes) override {
    if (capacity_ > 0 && used_ + bytes > capacity_) return nullptr;
    void* ptr = std::aligned_alloc(256, round_up(bytes, 256));
    if (ptr != nullptr) used_ += bytes;
    return ptr;
  }
  void raw_free(void* ptr, size_t bytes) override {
    std::free(ptr);
    used_ -= bytes;
  }
  size_t free_bytes() const override { return capacity_ > 0 ? capacity_ - used_ : 0; }
  size_t total_bytes() const override { return capacity_; }
  std::string name() const override { return capacity_ > 0 ? "host memory (capped)" : "host memory"; }

 private:
  size_t capacity_;
  size_t used_ = 0;  // guarded by the allocator's mutex
};

#if defined(MT_WITH_CUDA)
class CudaBackingStore final : public BackingStore {
 public:
  explicit CudaBackingStore(int index) : index_(index) {}
  void* raw_allocate(size_t bytes) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    void* ptr = nullptr;
    // A segment made during a CUDA-graph capture outlives the capture (the
    // graph's pool keeps it), so the allocation is safe; relaxed mode tells
    // the driver so, as PyTorch's allocator does.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t error = cudaMalloc(&ptr, bytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls work
      return nullptr;
    }
    check(error, "cudaMalloc");
    return ptr;
  }
  void raw_free(void* ptr, size_t) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    check(cudaFree(ptr), "cudaFree");
  }
  size_t free_bytes() const override { return info().first; }
  size_t total_bytes() const override { return info().second; }
  std::string name() const override { return fmt::format("cuda:{}", index_); }

 private:
  std::pair<size_t, size_t> info() const {
    size_t free = 0, total = 0;
    if (cudaSetDevice(index_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) return {0, 0};
    return {free, total};
  }
  static void check(cudaError_t error, const char* what) {
    if (error != cudaSuccess) fail("{} failed: {}", what, cudaGetErrorString(error));
  }
  int index_;
};
#endif

}  // namespace

CachingAllocatorConfig alloc_conf_from_environment() {
  const char* text = std::getenv("MT_CUDA_ALLOC_CONF");
  return text == nullptr ? CachingAllocatorConfig{} : parse_alloc_conf(text);
}

std::unique_ptr<BackingStore> make_host_backing_store(size_t capacity_bytes) {
  return std::make_unique<HostBackingStore>(capacity_bytes);
}

CachingAllocatorConfig parse_alloc_conf(const std::string& text) {
  CachingAllocatorConfig config;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    MT_CHECK(colon != std::string::npos, "MT_CUDA_ALLOC_CONF: expected key:value, got '{}' in '{}'", item, text);
    const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    if (key == "max_split_size_mb") {
      char* end = nullptr;
      const long long mb = std::strtoll(value.c_str(), &end, 10);
      MT_CHECK(end != value.c_str() && *end == '\0' && mb > 0,
               "MT_CUDA_ALLOC_CONF: max_split_size_mb needs a positive integer (MiB), got '{}'", value);
      config.max_split_size = static_cast<size_t>(mb) << 20;
    } else {
      fail("MT_CUDA_ALLOC_CONF: unknown option '{}' in '{}' (known: max_split_size_mb:N)", key, text);
    }
  }
  return config;
}

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<BackingStore> store, CachingAllocatorConfig config)
    : device_(device), store_(std::move(store)), config_(config) {}

CachingAllocator::~CachingAllocator() {
  // Static destruction order can outlive tensors on exit; free what is cached
  // and leave live blocks to the process teardown.
  std::lock_guard lock(mutex_);
  release_cached_segments();
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, size_t size, uint64_t stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  // Keep oversized blocks for oversized requests (max_split_size), and do not
  // hand a huge block to a request much smaller than it.
  if (size < config_.max_split_size && block->size >= config_.max_split_size) return nullptr;
  if (size >= config_.max_split_size && block->size >= size + kMediumSegment) return nullptr;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t segment_size, bool small_pool, uint64_t stream) {
  void* ptr = store_->raw_allocate(segment_size);
  if (ptr == nullptr) {
    ++stats_.num_ooms;
    release_cached_segments();
    ptr = store_->raw_allocate(segment_size);
    if (ptr == nullptr) return nullptr;
  }
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = segment_size;
  block->stream = stream;
  block->small_pool = small_pool;
  ++stats_.backend_mallocs;
  ++stats_.segments;
  stats_.reserved_bytes += static_cast<int64_t>(segment_size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

void* CachingAllocator::allocate(size_t bytes) { return allocate(bytes, current_stream(device_).id()); }

void* CachingAllocator::allocate(size_t bytes, uint64_t stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  const size_t size = round_up(bytes, kRound);
  const bool small = size <= kSmallRequest;
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* block = find_free_block(pool, size, stream);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    const size_t segment_size = small                    ? kSmallSegment
                                : size <= kMediumRequest ? kMediumSegment
                                                         : round_up(size, kLargeRound);
    block = new_segment(segment_size, small, stream);
    if (block == nullptr) throw_out_of_memory(bytes, segment_size);
  }
  // Split: the tail goes back to the pool as a free block of the same segment.
  const size_t remaining = block->size - size;
  const bool split = small ? remaining >= kRound : (remaining > kSmallRequest && block->size <= config_.max_split_size);
  if (split) {
    auto* rest = new Block;
    rest->ptr = block->ptr + size;
    rest->size = remaining;
    rest->stream = stream;
    rest->small_pool = block->small_pool;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
  }
  block->allocated = true;
  block->requested = bytes;
  live_[block->ptr] = block;
  stats_.allocated_bytes += static_cast<int64_t>(block->size);
  stats_.requested_bytes += static_cast<int64_t>(bytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.allocations;
  ++stats_.live_blocks;
  return block->ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), "{} allocator: free of a pointer it did not allocate", device_);
  // Captured kernels may have used this block before it was freed, and every
  // replay repeats them: nobody else may have it while the graph lives.
  if (capturing_stream_ != 0 && it->second->stream != capturing_stream_) {
    held_for_graph_[capturing_stream_].push_back(ptr);
    return;
  }
  free_block(it);
}

void CachingAllocator::free_block(std::unordered_map<void*, Block*>::iterator it) {
  Block* block = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block->size);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  --stats_.live_blocks;
  block->allocated = false;
  Pool& pool = block->small_pool ? small_pool_ : large_pool_;
  // Coalesce with free neighbours of the same segment.
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      // A live graph's replays write into its segments even when they look free.
      if (block->prev == nullptr && block->next == nullptr && !graph_streams_.contains(block->stream)) {
        note_host_sync(device_, "returning cached memory to the device (cudaFree waits for the device)");
        store_->raw_free(block->ptr, block->size);
        ++stats_.backend_frees;
        --stats_.segments;
        stats_.reserved_bytes -= static_cast<int64_t>(block->size);
        it = pool->erase(it);
        delete block;
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::begin_graph_capture(uint64_t stream) {
  std::lock_guard lock(mutex_);
  MT_CHECK(capturing_stream_ == 0, "{} allocator: a graph capture is already in progress", device_);
  capturing_stream_ = stream;
  graph_streams_.insert(stream);
}

void CachingAllocator::end_graph_capture() {
  std::lock_guard lock(mutex_);
  capturing_stream_ = 0;
}

void CachingAllocator::release_graph(uint64_t stream) {
  std::lock_guard lock(mutex_);
  if (capturing_stream_ == stream) capturing_stream_ = 0;
  graph_streams_.erase(stream);
  auto held = held_for_graph_.find(stream);
  if (held == held_for_graph_.end()) return;
  for (void* ptr : held->second) free_block(live_.find(ptr));
  held_for_graph_.erase(held);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_segments();
}

void CachingAllocator::throw_out_of_memory(size_t requested, size_t segment_size) {
  const size_t total = store_->total_bytes();
  const std::string device_memory =
      total > 0 ? fmt::format("{} free of {} total on {}", format_bytes(static_cast<double>(store_->free_bytes())),
                              format_bytes(static_cast<double>(total)), store_->name())
                : fmt::format("the {} backing store refused", store_->name());
  throw OutOfMemoryError(fmt::format(
      "out of memory on {}: tried to allocate {} (a {} segment); mixtape has {} allocated and {} reserved "
      "(the cache was freed and the allocation retried); {}. Try: a smaller batch size; mixed precision "
      "(AMP: f16/bf16 activations take half the memory); gradient accumulation (several smaller micro-batches "
      "per optimizer step); activation checkpointing (recompute activations in backward instead of keeping "
      "them); and if reserved is much larger than allocated, MT_CUDA_ALLOC_CONF=max_split_size_mb:N to limit "
      "fragmentation",
      device_, format_bytes(static_cast<double>(requested)), format_bytes(static_cast<double>(segment_size)),
      format_bytes(static_cast<double>(stats_.allocated_bytes)),
      format_bytes(static_cast<double>(stats_.reserved_bytes)), device_memory));
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return {stats_.allocated_bytes, stats_.peak_allocated_bytes, stats_.allocations, stats_.live_blocks};
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingAllocatorStats CachingAllocator::detailed_stats() const {
  std::lock_guard lock(mutex_);
  CachingAllocatorStats s = stats_;
  int64_t free_total = 0;
  s.cached_blocks = 0;
  s.largest_free_block = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* block : *pool) {
      free_total += static_cast<int64_t>(block->size);
      s.largest_free_block = std::max(s.largest_free_block, static_cast<int64_t>(block->size));
      ++s.cached_blocks;
    }
  }
  s.fragmentation =
      free_total > 0 ? 1.0 - static_cast<double>(s.largest_free_block) / static_cast<double>(free_total) : 0.0;
  return s;
}

// The device allocators are never destroyed: a tensor in a static object may
// be freed after static destruction began (and the CUDA runtime may be gone).
CachingAllocator& sim_caching_allocator() {
  static auto* allocator = new CachingAllocator(kSIM, make_host_backing_store(), alloc_conf_from_environment());
  return *allocator;
}

void empty_cache(Device device) {
  if (device.is_sim()) return sim_caching_allocator().empty_cache();
  if (device.is_cuda()) return cuda_caching_allocator(device.index).empty_cache();
}

CachingAllocator& cuda_caching_allocator(int index) {
#if defined(MT_WITH_CUDA)
  static std::mutex mutex;
  static auto& allocators = *new std::vector<std::unique_ptr<CachingAllocator>>();  // never destroyed
  std::lock_guard lock(mutex);
  if (index >= 0 && static_cast<size_t>(index) < allocators.size() && allocators[index]) return *allocators[index];
  const cuda::DeviceSummary devices = cuda::query_devices();
  if (devices.count == 0) {
    fail("no CUDA device available: {}; use the cpu or sim device",
         devices.error.empty() ? "the driver reports none" : devices.error);
  }
  MT_CHECK(index >= 0 && index < devices.count, "no CUDA device available: cuda:{} requested but {} device(s) found",
           index, devices.count);
  if (allocators.size() < static_cast<size_t>(devices.count)) allocators.resize(static_cast<size_t>(devices.count));
  allocators[index] = std::make_unique<CachingAllocator>(
      Device(DeviceType::CUDA, index), std::make_unique<CudaBackingStore>(index), alloc_conf_from_environment());
  return *allocators[index];
#else
  fail(
      "no CUDA device available: this build of mixtape has no CUDA support (configured without nvcc or with "
      "MT_CUDA=OFF); cuda:{} cannot be used, use the cpu or sim device",
      index);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, const char* what) {
  if (bytes == 0) return;
  // Between the host and a device this copy blocks the host (on sim it is the
  // same call, counted the same way). Device-to-device copies do not.
  if (dst_device.is_cpu() != src_device.is_cpu()) {
    note_host_sync(dst_device.is_cpu() ? src_device : dst_device, what);
  }
  // Deferred sim streams (runtime/sim/runtime.h) reorder work between
  // streams, never against the host: held work lands before a blocking copy.
  if (dst_device.is_sim() || src_device.is_sim()) simulator::run_all_deferred();
  if (dst_device.host_accessible() && src_device.host_accessible()) {
    std::memmove(dst, src, bytes);
    return;
  }
#if defined(MT_WITH_CUDA)
  const cudaError_t error = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (error != cudaSuccess)
    fail("copy from {} to {} ({} bytes): cudaMemcpy failed: {}", src_device, dst_device, bytes,
         cudaGetErrorString(error));
#else
  fail("copy from {} to {}: no CUDA device available: this build of mixtape has no CUDA support", src_device,
       dst_device);
#endif
}

}  // namespace mt
