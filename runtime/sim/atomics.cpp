// CUDA atomics for simulator-built kernels. Threads of one block are fibers on
// one OS thread, but blocks may run on several worker threads
// (MT_SIM_THREADS), so these are real atomic read-modify-writes.
#include <atomic>

#include "runtime/sim/intrinsics.h"

namespace mt::simulator::cuda_names {

namespace {
template <typename T, typename Update>
T update(T* address, Update compute_new) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, compute_new(old))) {
  }
  return old;
}
}  // namespace

#define MT_ATOMIC_ADD(T) \
  T atomicAdd(T* address, T value) { return std::atomic_ref<T>(*address).fetch_add(value); }
MT_ATOMIC_ADD(int)
MT_ATOMIC_ADD(unsigned)
MT_ATOMIC_ADD(unsigned long long)
MT_ATOMIC_ADD(float)
MT_ATOMIC_ADD(double)

int atomicSub(int* address, int value) { return std::atomic_ref<int>(*address).fetch_sub(value); }
unsigned atomicSub(unsigned* address, unsigned value) { return std::atomic_ref<unsigned>(*address).fetch_sub(value); }

#define MT_ATOMIC_EXCH(T) \
  T atomicExch(T* address, T value) { return std::atomic_ref<T>(*address).exchange(value); }
MT_ATOMIC_EXCH(int)
MT_ATOMIC_EXCH(unsigned)
MT_ATOMIC_EXCH(unsigned long long)
MT_ATOMIC_EXCH(float)

#define MT_ATOMIC_MIN_MAX(T)                                                                         \
  T atomicMin(T* address, T value) { return update(address, [&](T old) { return value < old ? value : old; }); } \
  T atomicMax(T* address, T value) { return update(address, [&](T old) { return value > old ? value : old; }); }
MT_ATOMIC_MIN_MAX(int)
MT_ATOMIC_MIN_MAX(unsigned)
MT_ATOMIC_MIN_MAX(long long)
MT_ATOMIC_MIN_MAX(unsigned long long)

#define MT_ATOMIC_CAS(T)                                      \
  T atomicCAS(T* address, T compare, T value) {               \
    std::atomic_ref<T>(*address).compare_exchange_strong(compare, value); \
    return compare; /* holds the old value either way */      \
  }
MT_ATOMIC_CAS(int)
MT_ATOMIC_CAS(unsigned)
MT_ATOMIC_CAS(unsigned long long)
MT_ATOMIC_CAS(unsigned short)

#define MT_ATOMIC_BITS(T)                                                                           \
  T atomicAnd(T* address, T value) { return std::atomic_ref<T>(*address).fetch_and(value); }        \
  T atomicOr(T* address, T value) { return std::atomic_ref<T>(*address).fetch_or(value); }          \
  T atomicXor(T* address, T value) { return std::atomic_ref<T>(*address).fetch_xor(value); }
MT_ATOMIC_BITS(int)
MT_ATOMIC_BITS(unsigned)

void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

}  // namespace mt::simulator::cuda_names
