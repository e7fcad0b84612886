// The shared-memory race checker, and the hooks the compiler's
// -fsanitize=thread instrumentation calls in simulator-built kernel code.
//
// We use GCC's ThreadSanitizer *instrumentation* only: every load/store in a
// kernel .cu compiled for the simulator becomes a call to __tsan_readN /
// __tsan_writeN. Instead of linking libtsan we define those functions here.
// When MT_SIM_RACECHECK is off they return after one branch; when it is on
// they forward shared-memory accesses to the RaceChecker of the running block.
// (So never link a target that uses these hooks with real -fsanitize=thread.)
#include "runtime/sim/racecheck.h"

#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace mt::simulator {
namespace detail {

thread_local RaceChecker* current_race_checker = nullptr;
thread_local unsigned current_linear_thread = 0;
bool racecheck_active = false;

namespace {

std::mutex reports_mutex;
std::vector<RaceReport> pending_reports;
constexpr std::size_t kMaxReportsPerLaunchBlock = 16;

// The calling OS thread's TLS blocks: static __shared__ variables
// (`static thread_local`) live in one of them.
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> this_thread_tls_ranges() {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        auto* list = static_cast<std::vector<std::pair<std::uintptr_t, std::uintptr_t>>*>(out);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& header = info->dlpi_phdr[i];
          if (header.p_type == PT_TLS && info->dlpi_tls_data != nullptr) {
            const auto begin = reinterpret_cast<std::uintptr_t>(info->dlpi_tls_data);
            list->emplace_back(begin, begin + header.p_memsz);
          }
        }
        return 0;
      },
      &ranges);
  return ranges;
}

}  // namespace

RaceChecker::RaceChecker(const KernelLaunch& launch, uint3 block_index, const std::byte* dynamic_base,
                         std::size_t dynamic_size)
    : launch_(launch),
      block_index_(block_index),
      dynamic_begin_(reinterpret_cast<std::uintptr_t>(dynamic_base)),
      dynamic_end_(reinterpret_cast<std::uintptr_t>(dynamic_base) + dynamic_size),
      tls_ranges_(this_thread_tls_ranges()) {}

bool RaceChecker::is_shared(std::uintptr_t address) const {
  if (address >= dynamic_begin_ && address < dynamic_end_) return true;
  for (const auto& [begin, end] : tls_ranges_) {
    if (address >= begin && address < end) return true;
  }
  return false;
}

// Is `earlier` (by another thread) ordered before the current access of
// `later_thread`? Barriers clear the history, so only warp-level
// synchronisation since then can order them.
bool RaceChecker::ordered(const Access& earlier, unsigned later_thread) const {
  const unsigned warp = later_thread / 32;
  if (static_cast<unsigned>(earlier.thread) / 32 != warp) return false;
  const unsigned both = (1u << (later_thread % 32)) | (1u << (static_cast<unsigned>(earlier.thread) % 32));
  for (const WarpSync& sync : warp_syncs_) {
    if (sync.sequence > earlier.sequence && sync.warp == warp && (sync.mask & both) == both) return true;
  }
  return false;
}

void RaceChecker::on_access(unsigned thread, std::uintptr_t address, std::size_t bytes, bool is_write) {
  if (!is_shared(address)) return;  // registers/stack and global memory are out of scope
  const Access now{static_cast<int>(thread), sequence_};
  for (std::size_t i = 0; i < bytes; ++i) {
    ByteHistory& history = bytes_[address + i];
    const bool other_writer = history.writer.thread >= 0 && history.writer.thread != now.thread &&
                              !ordered(history.writer, thread);
    if (!is_write) {
      if (other_writer) return report("read-after-write", history.writer, thread, address + i);
      Access& slot = history.readers[0].thread < 0 || history.readers[0].thread == now.thread ? history.readers[0]
                                                                                               : history.readers[1];
      slot = now;
      continue;
    }
    if (other_writer) return report("write-after-write", history.writer, thread, address + i);
    for (const Access& reader : history.readers) {
      if (reader.thread >= 0 && reader.thread != now.thread && !ordered(reader, thread)) {
        return report("write-after-read", reader, thread, address + i);
      }
    }
    history.writer = now;
    history.readers[0] = history.readers[1] = Access{};
  }
}

void RaceChecker::on_barrier() {
  bytes_.clear();
  warp_syncs_.clear();
}

void RaceChecker::on_warp_sync(unsigned warp, unsigned mask) { warp_syncs_.push_back({++sequence_, warp, mask}); }

uint3 RaceChecker::thread_index(unsigned linear) const {
  const dim3 b = launch_.block;
  return {linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)};
}

void RaceChecker::report(const char* kind, const Access& earlier, unsigned later_thread, std::uintptr_t address) {
  if (reported_.size() >= kMaxReportsPerLaunchBlock || !reported_.insert(address).second) return;
  RaceReport report;
  report.kernel = launch_.kernel_name;
  report.block = dim3(block_index_);
  report.kind = kind;
  report.first_thread = thread_index(static_cast<unsigned>(earlier.thread));
  report.second_thread = thread_index(later_thread);
  report.address = address;
  report.where = address >= dynamic_begin_ && address < dynamic_end_
                     ? fmt::format("dynamic shared memory, byte offset {}", address - dynamic_begin_)
                     : std::string("static __shared__ memory");
  publish_race_report(std::move(report));
}

void publish_race_report(RaceReport r) {
  std::fprintf(stderr,
               "mt::sim racecheck: %s race in kernel '%s', block (%u,%u,%u): thread (%u,%u,%u) then thread "
               "(%u,%u,%u) at address 0x%zx (%s) with no __syncthreads() between them\n",
               r.kind.c_str(), r.kernel.c_str(), r.block.x, r.block.y, r.block.z, r.first_thread.x, r.first_thread.y,
               r.first_thread.z, r.second_thread.x, r.second_thread.y, r.second_thread.z,
               static_cast<std::size_t>(r.address), r.where.c_str());
  const std::lock_guard lock(reports_mutex);
  pending_reports.push_back(std::move(r));
}

}  // namespace detail

namespace {
std::mutex racecheck_mutex;
int racecheck_override = -1;  // -1: follow MT_SIM_RACECHECK
}  // namespace

bool racecheck_enabled() {
  const std::lock_guard lock(racecheck_mutex);
  if (racecheck_override >= 0) return racecheck_override == 1;
  const char* value = std::getenv("MT_SIM_RACECHECK");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

void set_racecheck_enabled(bool enabled) {
  const std::lock_guard lock(racecheck_mutex);
  racecheck_override = enabled ? 1 : 0;
}

std::vector<RaceReport> take_race_reports() {
  const std::lock_guard lock(detail::reports_mutex);
  return std::exchange(detail::pending_reports, {});
}

}  // namespace mt::simulator

// ---- the instrumentation hooks ------------------------------------------------------
// Names and signatures are fixed by GCC's -fsanitize=thread code generation.

namespace {
inline void instrumented_access(const void* address, std::size_t bytes, bool is_write) {
  using namespace mt::simulator::detail;
  if (!racecheck_active) return;
  if (RaceChecker* checker = current_race_checker) {
    checker->on_access(current_linear_thread, reinterpret_cast<std::uintptr_t>(address), bytes, is_write);
  }
}
}  // namespace

#define MT_TSAN_ACCESS(N)                                                                         \
  void __tsan_read##N(void* address) { instrumented_access(address, N, false); }                  \
  void __tsan_write##N(void* address) { instrumented_access(address, N, true); }                  \
  void __tsan_unaligned_read##N(void* address) { instrumented_access(address, N, false); }        \
  void __tsan_unaligned_write##N(void* address) { instrumented_access(address, N, true); }        \
  void __tsan_volatile_read##N(void* address) { instrumented_access(address, N, false); }         \
  void __tsan_volatile_write##N(void* address) { instrumented_access(address, N, true); }

// Atomics in instrumented code (none in kernels themselves; they may come from
// standard headers) are performed for real, sequentially consistent.
#define MT_TSAN_ATOMIC(BITS, T)                                                                                   \
  T __tsan_atomic##BITS##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }         \
  void __tsan_atomic##BITS##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }         \
  T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##BITS##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##BITS##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##BITS##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##BITS##_fetch_nand(volatile T* a, T v, int) {                                                   \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                                \
  int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                         \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                       \
  }                                                                                                                \
  int __tsan_atomic##BITS##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                           \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                                \
  T __tsan_atomic##BITS##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                               \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                             \
    return c;                                                                                                      \
  }

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* address, unsigned long size) { instrumented_access(address, size, false); }
void __tsan_write_range(void* address, unsigned long size) { instrumented_access(address, size, true); }
MT_TSAN_ACCESS(1)
MT_TSAN_ACCESS(2)
MT_TSAN_ACCESS(4)
MT_TSAN_ACCESS(8)
MT_TSAN_ACCESS(16)
MT_TSAN_ATOMIC(8, unsigned char)
MT_TSAN_ATOMIC(16, unsigned short)
MT_TSAN_ATOMIC(32, unsigned int)
MT_TSAN_ATOMIC(64, unsigned long long)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}
