// Scratch memory for the CPU kernels' temporaries (a bf16 operand widened to
// f32, a result before it is rounded into its output), from the same cache
// of freed large blocks as CPU tensors (core/allocator.h): a training step's
// temporaries of the same sizes as the last step's find their blocks again
// instead of being page-faulted in fresh (most of a gpt-small bf16 step's
// page faults were these). Not counted as tensor memory in memory_stats().
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace mt {

// Whether freed large blocks are kept: not under AddressSanitizer, which
// must see every free to catch a use after it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kHostCacheKeepsBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kHostCacheKeepsBlocks = false;
#else
inline constexpr bool kHostCacheKeepsBlocks = true;
#endif
#else
inline constexpr bool kHostCacheKeepsBlocks = true;
#endif

// 64-byte aligned, uninitialised; null for 0 bytes. Throws OutOfMemoryError.
void* allocate_cpu_scratch(size_t bytes);
void free_cpu_scratch(void* ptr, size_t bytes);

// n uninitialised T's of scratch, freed (back to the cache) on destruction.
template <typename T>
class HostScratch {
 public:
  HostScratch() = default;
  explicit HostScratch(int64_t n)
      : bytes_(static_cast<size_t>(n) * sizeof(T)), ptr_(static_cast<T*>(allocate_cpu_scratch(bytes_))) {}
  HostScratch(HostScratch&& other) noexcept
      : bytes_(std::exchange(other.bytes_, 0)), ptr_(std::exchange(other.ptr_, nullptr)) {}
  HostScratch& operator=(HostScratch&& other) noexcept {
    std::swap(bytes_, other.bytes_);
    std::swap(ptr_, other.ptr_);
    return *this;
  }
  HostScratch(const HostScratch&) = delete;
  HostScratch& operator=(const HostScratch&) = delete;
  ~HostScratch() { free_cpu_scratch(ptr_, bytes_); }

  T* get() const { return ptr_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  size_t bytes_ = 0;
  T* ptr_ = nullptr;
};

}  // namespace mt
