// The block scheduler: CUDA threads as Boost.Context fibers.
//
// One BlockRun owns the fibers of one thread block. It resumes every runnable
// thread in index order (a "pass"); each runs until it finishes or must wait
// for other threads. After a pass nothing is runnable, so the scheduler looks
// for something that can complete — a warp op all its lanes reached, an
// __activemask() group, a barrier the whole block reached — and otherwise
// reports a deadlock. Blocks never wait on each other (CUDA gives no such
// guarantee either), so blocks simply run one after another.
#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/launch_check.h"
#include "runtime/sim/hopper.h"
#include "runtime/sim/racecheck.h"
#include "runtime/sim/runtime.h"

// Built with AddressSanitizer (GCC says __SANITIZE_ADDRESS__, clang __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define MT_SIM_WITH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MT_SIM_WITH_ASAN 1
#endif
#endif
#if defined(MT_SIM_WITH_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace ctx = boost::context;

namespace mt::simulator {

thread_local constinit uint3 threadIdx{};
thread_local constinit uint3 blockIdx{};
thread_local constinit dim3 blockDim{};
thread_local constinit dim3 gridDim{};

namespace {

// ---- settings -------------------------------------------------------------------

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  MT_CHECK(end != value && *end == '\0' && parsed >= 0, "{}: expected a non-negative integer, got '{}'", name, value);
  return static_cast<int>(parsed);
}

std::atomic<int> configured_workers{-1};
std::atomic<std::uint64_t> switch_counter{0};

// ---- telling AddressSanitizer about stack switches -----------------------------------

// ASan keeps the bounds of the stack it thinks the code runs on; a fiber
// switch it is not told about makes it misjudge every frame of the other
// stack (a thrown exception then reports stack-buffer-overflow in its own
// unwinding). So each switch in and out of a simulated thread is announced
// (start) and completed on the other side (finish). Without ASan
// (MT_SIM_WITH_ASAN, defined after the includes) these are empty.

struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

// `fake_stack`: where the leaving stack's ASan state is kept (null: it is
// leaving for good).
void start_stack_switch(void** fake_stack, StackBounds to) {
#if defined(MT_SIM_WITH_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
}

// On the arriving stack; returns the bounds of the stack it came from.
StackBounds finish_stack_switch(void* fake_stack) {
  StackBounds from;
#if defined(MT_SIM_WITH_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, &from.bottom, &from.size);
#endif
  return from;
}

// ---- fiber stacks ------------------------------------------------------------------

// Stacks are mmap'ed with a guard page (a stack overflow faults instead of
// corrupting a neighbour) and recycled across blocks: allocating 1024 stacks
// per block would cost more than running small kernels.
class StackPool {
 public:
  explicit StackPool(std::size_t bytes) : allocator_(bytes) {}
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    for (auto& stack : free_) allocator_.deallocate(stack);
  }
  ctx::stack_context allocate() {
    if (free_.empty()) return allocator_.allocate();
    const ctx::stack_context stack = free_.back();
    free_.pop_back();
    return stack;
  }
  void release(ctx::stack_context& stack) { free_.push_back(stack); }

 private:
  ctx::protected_fixedsize_stack allocator_;
  std::vector<ctx::stack_context> free_;
};

// The StackAllocator Boost.Context copies into each fiber: a handle to the
// pool, and where to note the fiber's stack bounds (for ASan).
struct PooledStack {
  StackPool* pool;
  StackBounds* bounds;
  ctx::stack_context allocate() {
    const ctx::stack_context stack = pool->allocate();
    *bounds = {static_cast<const char*>(stack.sp) - stack.size, stack.size};
    return stack;
  }
  void deallocate(ctx::stack_context& stack) noexcept { pool->release(stack); }
};

// ---- per-OS-thread state --------------------------------------------------------

// Everything a worker thread reuses from block to block.
struct Worker {
  StackPool stacks{fiber_stack_bytes()};
  std::byte* dynamic_shared = nullptr;
  std::size_t dynamic_capacity = 0;

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // 1024-byte aligned, so the address bits the Hopper swizzles use (bits 4..9)
  // are those of the offset in the shared window, as on a GPU.
  static constexpr std::align_val_t kArenaAlignment{1024};
  ~Worker() { ::operator delete(dynamic_shared, kArenaAlignment); }

  std::byte* shared_arena(std::size_t bytes) {
    if (bytes > dynamic_capacity) {
      ::operator delete(dynamic_shared, kArenaAlignment);
      dynamic_shared = static_cast<std::byte*>(::operator new(bytes, kArenaAlignment));
      dynamic_capacity = bytes;
    }
    return dynamic_shared;
  }
};

Worker& this_worker() {
  thread_local Worker worker;
  return worker;
}

enum class ThreadState { Runnable, AtBarrier, AtClusterBarrier, AtWarpOp, AtActiveMask, AtMbarrier, Finished };

// The simulator's encoding of an mbarrier's 8 bytes.
struct MbarrierState {
  std::int32_t tx;                  // bytes the current phase still waits for
  std::uint16_t expected;           // arrivals per phase
  std::uint16_t pending_and_phase;  // bit 15: phase parity; bits 0..14: arrivals still pending
  unsigned phase() const { return pending_and_phase >> 15; }
  unsigned pending() const { return pending_and_phase & 0x7fffu; }
};
static_assert(sizeof(MbarrierState) == 8, "an mbarrier is 8 bytes");

MbarrierState read_mbarrier(const void* barrier) {
  MbarrierState s;
  std::memcpy(&s, barrier, sizeof(s));
  return s;
}

// Completes the phase when nothing is pending: flips the parity, re-arms the arrivals.
void settle_mbarrier(void* barrier, MbarrierState s) {
  if (s.pending() == 0 && s.tx == 0) {
    s.pending_and_phase = static_cast<std::uint16_t>(((s.phase() ^ 1u) << 15) | s.expected);
  }
  std::memcpy(barrier, &s, sizeof(s));
}

// A copy by the copy engine (cp.async.bulk, a tensor-map tile): `land`
// writes shared memory, then `bytes` complete on each of `barriers` (one per
// destination block: several for a multicast).
struct PendingBulkCopy {
  std::function<void()> land;
  unsigned bytes;
  std::vector<void*> barriers;
};

struct PendingCopy {
  void* dst;
  const void* src;
  unsigned copy_bytes;
  unsigned src_bytes;
};

struct SimThread {
  uint3 index;
  unsigned linear = 0;
  ThreadState state = ThreadState::Runnable;
  ctx::fiber fiber;            // this thread, while suspended
  ctx::fiber scheduler;        // the scheduler, while this thread runs
  StackBounds stack;           // this thread's fiber stack
  void* fake_stack = nullptr;  // ASan's state of it while suspended
  SourceSite site;
  // Warp op in progress.
  const char* op_name = nullptr;
  WarpCompleteFn op = nullptr;
  unsigned mask = 0;
  std::uint64_t op_arg = 0;
  WarpLane lane;
  unsigned active_mask_result = 0;
  // cp.async groups: not yet committed, and committed but not yet waited for.
  std::vector<PendingCopy> uncommitted;
  std::deque<std::vector<PendingCopy>> committed;
  // mbarrier wait in progress.
  const void* mbarrier = nullptr;
  unsigned parity = 0;
  // wgmma issued and committed, not yet retired by a wait_group.
  hopper::WgmmaQueue wgmma;
};

class BlockRun;
class ClusterRun;
thread_local SimThread* current_thread = nullptr;
thread_local BlockRun* current_block = nullptr;

std::string short_file(const SourceSite& site) {
  const std::string file = site.file_name();
  const auto slash = file.find_last_of('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

std::string site_text(const SourceSite& site) { return fmt::format("{}:{}", short_file(site), site.line()); }

bool same_site(const SourceSite& a, const SourceSite& b) {
  return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

// ---- one thread block -----------------------------------------------------------

class BlockRun {
 public:
  // `shared` is this block's dynamic shared memory; `cluster` the blocks that
  // run with it (itself included), `rank` its place among them.
  BlockRun(const KernelLaunch& launch, uint3 block_index, Worker& worker, std::byte* shared, ClusterRun* cluster,
           unsigned rank)
      : launch_(launch), block_index_(block_index), threads_(launch.block.count()), cluster_(cluster), rank_(rank) {
    dynamic_shared_ = shared;
    // Fresh shared memory is garbage on a GPU; all-ones bytes (NaN, -1) make a
    // read-before-write show up in results instead of reading a lucky zero.
    if (launch.dynamic_shared_bytes > 0) std::memset(dynamic_shared_, 0xff, launch.dynamic_shared_bytes);
    // The race checker follows one block's shared memory; a cluster's blocks
    // also touch each other's, which it cannot see, so clusters go unchecked.
    if (racecheck_enabled() && launch.cluster.count() == 1) {
      race_checker_.emplace(launch, block_index, dynamic_shared_, launch.dynamic_shared_bytes);
    }
    create_fibers(worker);
  }

  // ---- what ClusterRun drives, one step at a time ----

  // Resumes every runnable thread once; rethrows what kernel code threw.
  void run_pass_and_check() {
    current_block = this;
    blockIdx = block_index_;
    detail::current_race_checker = race_checker_ ? &*race_checker_ : nullptr;
    run_pass();
    if (error_) std::rethrow_exception(error_);
  }
  bool finished() const { return finished_ == threads_.size(); }
  // Completes warp ops, __activemask groups and mbarrier waits that can; true if any.
  bool complete_waits() { return complete_warp_ops() || resolve_active_masks() || release_mbarrier_waiters(); }
  bool land_copies() { return land_bulk_copies(); }
  // Releases a __syncthreads() every thread reached; true if it did.
  bool release_barrier() {
    if (!barrier_releasable()) return false;
    for (SimThread& thread : threads_) thread.state = ThreadState::Runnable;
    if (race_checker_) race_checker_->on_barrier();
    return true;
  }
  // Every thread of the block is at the cluster barrier or finished.
  bool at_cluster_barrier() const {
    return std::all_of(threads_.begin(), threads_.end(), [](const SimThread& t) {
      return t.state == ThreadState::AtClusterBarrier || t.state == ThreadState::Finished;
    });
  }
  void leave_cluster_barrier() {
    for (SimThread& thread : threads_) {
      if (thread.state == ThreadState::AtClusterBarrier) thread.state = ThreadState::Runnable;
    }
  }
  [[noreturn]] void report_deadlock() { throw_deadlock(); }

  ClusterRun& cluster() const { return *cluster_; }
  unsigned rank() const { return rank_; }
  std::byte* dynamic_shared() const { return dynamic_shared_; }
  std::size_t dynamic_shared_bytes() const { return launch_.dynamic_shared_bytes; }
  std::size_t thread_count() const { return threads_.size(); }
  detail::RaceChecker* race_checker() { return race_checker_ ? &*race_checker_ : nullptr; }

  // Threads still suspended (a deadlock or an error ended the block) are
  // unwound by Boost.Context when their fibers go: a switch into each.
  ~BlockRun() {
    for (SimThread& thread : threads_) {
      if (!thread.fiber) continue;
      void* fake_stack = nullptr;
      start_stack_switch(&fake_stack, thread.stack);
      thread.fiber = {};
      finish_stack_switch(fake_stack);
    }
  }
  BlockRun(const BlockRun&) = delete;
  BlockRun& operator=(const BlockRun&) = delete;

  // Called from a simulated thread: park it and switch back to the scheduler.
  static void wait(SimThread& thread) {
    start_stack_switch(&thread.fake_stack, current_block->scheduler_stack_);
    thread.scheduler = std::move(thread.scheduler).resume();
    finish_stack_switch(thread.fake_stack);
  }

 private:
  void create_fibers(Worker& worker) {
    const dim3 block = launch_.block;
    for (unsigned linear = 0; linear < threads_.size(); ++linear) {
      SimThread& thread = threads_[linear];
      thread.linear = linear;
      thread.index = {linear % block.x, (linear / block.x) % block.y, linear / (block.x * block.y)};
      thread.fiber =
          ctx::fiber(std::allocator_arg, PooledStack{&worker.stacks, &thread.stack},
                     [this, &thread](ctx::fiber&& scheduler) { return thread_main(thread, std::move(scheduler)); });
    }
  }

  ctx::fiber thread_main(SimThread& thread, ctx::fiber&& scheduler) {
    scheduler_stack_ = finish_stack_switch(nullptr);
    thread.scheduler = std::move(scheduler);
    try {
      launch_.run_thread(launch_.context);
    } catch (const ctx::detail::forced_unwind&) {
      // Boost.Context is unwinding this fiber's stack (~BlockRun); let it
      // finish, then it leaves this stack for good.
      finish_stack_switch(thread.fake_stack);
      start_stack_switch(nullptr, scheduler_stack_);
      throw;
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
    if (!error_ && (!thread.wgmma.committed.empty() || !thread.wgmma.uncommitted.empty())) {
      error_ = std::make_exception_ptr(Error(
          fmt::format("thread {} finished with wgmma work it never waited for ({} committed groups, {} uncommitted "
                      "instructions): its accumulators were never written (wgmma.wait_group 0 before reading them)",
                      thread.linear, thread.wgmma.committed.size(), thread.wgmma.uncommitted.size())));
    }
    thread.state = ThreadState::Finished;
    ++finished_;
    start_stack_switch(nullptr, scheduler_stack_);
    return std::move(thread.scheduler);
  }

  void resume(SimThread& thread) {
    current_thread = &thread;
    threadIdx = thread.index;
    detail::current_linear_thread = thread.linear;
    void* fake_stack = nullptr;
    start_stack_switch(&fake_stack, thread.stack);
    thread.fiber = std::move(thread.fiber).resume();
    finish_stack_switch(fake_stack);
    current_thread = nullptr;
    switch_counter.fetch_add(2, std::memory_order_relaxed);  // into the thread and back
  }

  void run_pass() {
    for (SimThread& thread : threads_) {
      if (thread.state != ThreadState::Runnable) continue;
      resume(thread);
      if (error_) return;
    }
  }

  unsigned warp_count() const { return static_cast<unsigned>((threads_.size() + 31) / 32); }

  // Completes every warp op whose lanes have all arrived; true if any did.
  bool complete_warp_ops() {
    bool progressed = false;
    for (unsigned warp = 0; warp < warp_count(); ++warp) {
      for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned linear = warp * 32 + lane;
        if (linear >= threads_.size()) break;
        SimThread& thread = threads_[linear];
        if (thread.state == ThreadState::AtWarpOp && warp_group_ready(warp, thread)) {
          complete_warp_group(warp, thread);
          progressed = true;
        }
      }
    }
    return progressed;
  }

  bool warp_group_ready(unsigned warp, const SimThread& leader) {
    const unsigned own_lane = leader.linear % 32;
    if (((leader.mask >> own_lane) & 1u) == 0) {
      fail_in_block(fmt::format("thread {} called {} at {} with mask 0x{:08x}, which does not include its own lane {}",
                                leader.linear, leader.op_name, site_text(leader.site), leader.mask, own_lane));
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
      if (((leader.mask >> lane) & 1u) == 0) continue;
      const unsigned linear = warp * 32 + lane;
      if (linear >= threads_.size()) {
        fail_in_block(
            fmt::format("thread {} called {} at {} with mask 0x{:08x}, but lane {} does not exist "
                        "(the block has {} threads)",
                        leader.linear, leader.op_name, site_text(leader.site), leader.mask, lane, threads_.size()));
      }
      const SimThread& other = threads_[linear];
      if (other.state != ThreadState::AtWarpOp || other.op != leader.op || other.mask != leader.mask ||
          other.op_arg != leader.op_arg) {
        return false;
      }
    }
    return true;
  }

  void complete_warp_group(unsigned warp, SimThread& leader) {
    WarpLane lanes[32] = {};
    const unsigned mask = leader.mask;
    for (unsigned lane = 0; lane < 32; ++lane) {
      if ((mask >> lane) & 1u) lanes[lane] = threads_[warp * 32 + lane].lane;
    }
    leader.op(mask, lanes, leader.op_arg);
    for (unsigned lane = 0; lane < 32; ++lane) {
      if ((mask >> lane) & 1u) threads_[warp * 32 + lane].state = ThreadState::Runnable;
    }
    if (race_checker_) race_checker_->on_warp_sync(warp, mask);
  }

  // Threads waiting for an mbarrier phase that has completed run again; true if any.
  bool release_mbarrier_waiters() {
    bool progressed = false;
    for (SimThread& thread : threads_) {
      if (thread.state == ThreadState::AtMbarrier && read_mbarrier(thread.mbarrier).phase() != thread.parity) {
        thread.state = ThreadState::Runnable;
        progressed = true;
      }
    }
    return progressed;
  }

 public:
  void queue_bulk_copy(const PendingBulkCopy& copy) { bulk_copies_.push_back(copy); }

 private:
  // Every queued bulk copy lands and completes its bytes on its barrier; true if any did.
  bool land_bulk_copies() {
    if (bulk_copies_.empty()) return false;
    for (const PendingBulkCopy& copy : bulk_copies_) {
      // Not reported to the race checker: the copy is no thread's access, and
      // readers are ordered after it by the mbarrier wait, not by __syncthreads.
      copy.land();
      for (void* barrier : copy.barriers) {
        MbarrierState s = read_mbarrier(barrier);
        s.tx -= static_cast<std::int32_t>(copy.bytes);
        settle_mbarrier(barrier, s);
      }
    }
    bulk_copies_.clear();
    return true;
  }

  // Lanes parked at one __activemask() call form the active set; true if any.
  bool resolve_active_masks() {
    bool progressed = false;
    for (unsigned warp = 0; warp < warp_count(); ++warp) {
      for (unsigned lane = 0; lane < 32 && warp * 32 + lane < threads_.size(); ++lane) {
        SimThread& leader = threads_[warp * 32 + lane];
        if (leader.state != ThreadState::AtActiveMask) continue;
        unsigned mask = 0;
        for (unsigned other = lane; other < 32 && warp * 32 + other < threads_.size(); ++other) {
          const SimThread& t = threads_[warp * 32 + other];
          if (t.state == ThreadState::AtActiveMask && same_site(t.site, leader.site)) mask |= 1u << other;
        }
        for (unsigned other = lane; other < 32; ++other) {
          if ((mask >> other) & 1u) {
            threads_[warp * 32 + other].active_mask_result = mask;
            threads_[warp * 32 + other].state = ThreadState::Runnable;
          }
        }
        progressed = true;
      }
    }
    return progressed;
  }

  // Every thread waits at one __syncthreads() (the same line; none finished).
  bool barrier_releasable() const {
    if (finished_ != 0) return false;
    for (const SimThread& thread : threads_) {
      if (thread.state != ThreadState::AtBarrier || !same_site(thread.site, threads_.front().site)) return false;
    }
    return true;
  }

  static std::string describe_state(const SimThread& thread) {
    switch (thread.state) {
      case ThreadState::Finished: return "finished (returned from the kernel)";
      case ThreadState::AtBarrier: return fmt::format("wait at __syncthreads() at {}", site_text(thread.site));
      case ThreadState::AtWarpOp:
        return fmt::format("wait at {} (mask 0x{:08x}) at {}", thread.op_name, thread.mask, site_text(thread.site));
      case ThreadState::AtActiveMask: return fmt::format("wait at __activemask() at {}", site_text(thread.site));
      case ThreadState::AtClusterBarrier:
        return fmt::format("wait at the cluster barrier at {}", site_text(thread.site));
      case ThreadState::AtMbarrier: {
        const MbarrierState s = read_mbarrier(thread.mbarrier);
        return fmt::format("wait for phase parity {} of the mbarrier at {} ({} arrivals and {} tx bytes pending) at {}",
                           thread.parity, thread.mbarrier, s.pending(), s.tx, site_text(thread.site));
      }
      case ThreadState::Runnable: break;
    }
    return "runnable";
  }

  // Groups consecutive threads in the same state: "threads 0..31 wait at ...".
  [[noreturn]] void throw_deadlock() {
    std::string details;
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= threads_.size(); ++i) {
      const std::string state = describe_state(threads_[begin]);
      if (i < threads_.size() && describe_state(threads_[i]) == state) continue;
      details += begin + 1 == i ? fmt::format("\n  thread {} {}", begin, state)
                                : fmt::format("\n  threads {}..{} {}", begin, i - 1, state);
      begin = i;
    }
    fail_in_block(fmt::format(
        "deadlock: no thread can make progress. Every thread of a block must reach the same __syncthreads(), "
        "and every lane named in a warp op's mask must reach that op (thread numbers are x + y*blockDim.x + "
        "z*blockDim.x*blockDim.y):{}",
        details));
  }

  [[noreturn]] void fail_in_block(const std::string& what) const {
    const dim3 b = launch_.block;
    const dim3 g = launch_.grid;
    fail("mt::sim: kernel '{}', block ({},{},{}) of grid ({},{},{}), block size ({},{},{}): {}", launch_.kernel_name,
         block_index_.x, block_index_.y, block_index_.z, g.x, g.y, g.z, b.x, b.y, b.z, what);
  }

  const KernelLaunch& launch_;
  uint3 block_index_;
  std::vector<SimThread> threads_;
  ClusterRun* cluster_;
  unsigned rank_;
  StackBounds scheduler_stack_;  // the OS thread's stack the scheduler runs on
  std::size_t finished_ = 0;
  std::exception_ptr error_;
  std::byte* dynamic_shared_ = nullptr;
  std::optional<detail::RaceChecker> race_checker_;
  std::vector<PendingBulkCopy> bulk_copies_;
};

SimThread& require_thread(const char* what) {
  MT_CHECK(current_thread != nullptr, "{} called outside a simulated kernel", what);
  return *current_thread;
}

BlockRun& require_block(const char* what) {
  require_thread(what);
  return *current_block;
}

// ---- running a launch ------------------------------------------------------------

uint3 block_at(const dim3& grid, std::size_t linear) {
  return {static_cast<unsigned>(linear % grid.x), static_cast<unsigned>((linear / grid.x) % grid.y),
          static_cast<unsigned>(linear / (std::size_t{grid.x} * grid.y))};
}

// The blocks of one thread block cluster (one block without clusters), run
// together: their threads interleave pass by pass, so one block can wait on
// an mbarrier that another's threads or copies complete, and a deadlock is
// only reported when no block of the cluster can move.
class ClusterRun {
 public:
  ClusterRun(const KernelLaunch& launch, std::size_t linear_cluster, Worker& worker) {
    const dim3 c = launch.cluster;
    const dim3 clusters(launch.grid.x / c.x, launch.grid.y / c.y, launch.grid.z / c.z);
    const uint3 at = block_at(clusters, linear_cluster);
    // Each block's dynamic shared memory on its own 1024-byte boundary of one arena.
    const std::size_t stride = (launch.dynamic_shared_bytes + 1023) / 1024 * 1024;
    std::byte* arena = worker.shared_arena(stride * c.count());
    blocks_.reserve(c.count());
    for (unsigned rank = 0; rank < c.count(); ++rank) {
      const uint3 index{at.x * c.x + rank % c.x, at.y * c.y + (rank / c.x) % c.y, at.z * c.z + rank / (c.x * c.y)};
      blocks_.push_back(std::make_unique<BlockRun>(launch, index, worker, arena + rank * stride, this, rank));
    }
  }

  // Runs the cluster to completion; throws on deadlock or a kernel exception.
  void run() {
    struct Reset {
      ~Reset() {
        current_block = nullptr;
        detail::current_race_checker = nullptr;
      }
    } reset;
    for (;;) {
      for (auto& block : blocks_) block->run_pass_and_check();
      if (std::all_of(blocks_.begin(), blocks_.end(), [](const auto& b) { return b->finished(); })) return;
      if (any_block([](BlockRun& b) { return b.complete_waits(); })) continue;
      if (any_block([](BlockRun& b) { return b.land_copies(); })) continue;
      if (release_cluster_barrier()) continue;
      if (any_block([](BlockRun& b) { return b.release_barrier(); })) continue;
      for (auto& block : blocks_) {
        if (!block->finished()) block->report_deadlock();
      }
    }
  }

  std::size_t size() const { return blocks_.size(); }
  BlockRun& block(unsigned rank) { return *blocks_[rank]; }

 private:
  template <typename Step>
  bool any_block(Step step) {
    bool progressed = false;
    for (auto& block : blocks_) progressed = step(*block) || progressed;
    return progressed;
  }

  // barrier.cluster: every thread of every block there (or finished).
  bool release_cluster_barrier() {
    if (!std::all_of(blocks_.begin(), blocks_.end(), [](const auto& b) { return b->at_cluster_barrier(); })) {
      return false;
    }
    for (auto& block : blocks_) block->leave_cluster_barrier();
    return true;
  }

  std::vector<std::unique_ptr<BlockRun>> blocks_;
};

void run_cluster(const KernelLaunch& launch, std::size_t linear_cluster) {
  const dim3 c = launch.cluster;
  const uint3 first = block_at(dim3(launch.grid.x / c.x, launch.grid.y / c.y, launch.grid.z / c.z), linear_cluster);
  const uint3 index{first.x * c.x, first.y * c.y, first.z * c.z};
  const std::string which =
      c.count() == 1 ? fmt::format("block ({},{},{})", index.x, index.y, index.z)
                     : fmt::format("cluster of {} blocks from ({},{},{})", c.count(), index.x, index.y, index.z);
  try {
    ClusterRun cluster(launch, linear_cluster, this_worker());
    cluster.run();
  } catch (const Error& error) {
    if (std::strncmp(error.what(), "mt::sim:", 8) == 0) throw;
    fail("mt::sim: kernel '{}', {}: {}", launch.kernel_name, which, error.what());
  } catch (const std::exception& error) {
    fail("mt::sim: kernel '{}', {} threw: {}", launch.kernel_name, which, error.what());
  }
}

// Runs clusters [0, count) on this OS thread; stops at the first failure.
void run_clusters_here(const KernelLaunch& launch, std::atomic<std::size_t>& next, std::size_t count,
                       std::atomic<bool>& failed) {
  blockDim = launch.block;
  gridDim = launch.grid;
  for (std::size_t cluster = next.fetch_add(1); cluster < count && !failed.load(); cluster = next.fetch_add(1)) {
    run_cluster(launch, cluster);
  }
}

}  // namespace

// ---- public API ---------------------------------------------------------------------

int worker_threads() {
  int workers = configured_workers.load();
  if (workers < 0) workers = env_int("MT_SIM_THREADS", 1);
  if (workers == 0) workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return workers;
}

void set_worker_threads(int count) { configured_workers.store(count); }

std::size_t fiber_stack_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(std::max(16, env_int("MT_SIM_STACK_KB", 64))) * 1024;
  return bytes;
}

std::uint64_t context_switch_count() { return switch_counter.load(std::memory_order_relaxed); }

void run_kernel(const KernelLaunch& launch) {
  MT_CHECK(current_thread == nullptr,
           "mt::sim: kernel '{}' launched from inside a kernel (dynamic parallelism is "
           "not simulated)",
           launch.kernel_name);
  kernels::detail::check_launch_shape(
      launch.kernel_name, {launch.grid.x, launch.grid.y, launch.grid.z, launch.block.x, launch.block.y, launch.block.z,
                           launch.dynamic_shared_bytes});
  const dim3 c = launch.cluster;
  MT_CHECK(c.count() >= 1 && c.count() <= 16 && launch.grid.x % c.x == 0 && launch.grid.y % c.y == 0 &&
               launch.grid.z % c.z == 0,
           "mt::sim: kernel '{}': cluster ({},{},{}) must hold 1..16 blocks and divide the grid ({},{},{})",
           launch.kernel_name, c.x, c.y, c.z, launch.grid.x, launch.grid.y, launch.grid.z);
  detail::racecheck_active = racecheck_enabled();
  const std::size_t blocks = std::size_t{launch.grid.x} * launch.grid.y * launch.grid.z / c.count();  // clusters
  const std::size_t workers = std::min<std::size_t>(static_cast<std::size_t>(worker_threads()), blocks);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  if (workers <= 1) {
    run_clusters_here(launch, next, blocks, failed);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < workers; ++i) {
    pool.emplace_back([&] {
      try {
        run_clusters_here(launch, next, blocks, failed);
      } catch (...) {
        failed = true;
        const std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

void syncthreads(SourceSite site) {
  SimThread& thread = require_thread("__syncthreads()");
  thread.state = ThreadState::AtBarrier;
  thread.site = site;
  BlockRun::wait(thread);
}

void warp_sync(const char* op_name, WarpCompleteFn complete, unsigned mask, const void* input, void* output,
               std::uint64_t op_arg, SourceSite site) {
  SimThread& thread = require_thread(op_name);
  thread.state = ThreadState::AtWarpOp;
  thread.site = site;
  thread.op_name = op_name;
  thread.op = complete;
  thread.mask = mask;
  thread.op_arg = op_arg;
  thread.lane = {input, output};
  BlockRun::wait(thread);
}

unsigned active_mask(SourceSite site) {
  SimThread& thread = require_thread("__activemask()");
  thread.state = ThreadState::AtActiveMask;
  thread.site = site;
  BlockRun::wait(thread);
  return thread.active_mask_result;
}

unsigned lane_id() { return require_thread("lane id").linear % 32; }

void* dynamic_shared_memory() {
  require_thread("dynamic shared memory");
  return current_block->dynamic_shared();
}

void note_memory_access(const void* address, std::size_t bytes, bool is_write) {
  if (current_thread == nullptr || current_block == nullptr) return;
  if (detail::RaceChecker* checker = current_block->race_checker()) {
    checker->on_access(current_thread->linear, reinterpret_cast<std::uintptr_t>(address), bytes, is_write);
  }
}

void cp_async(void* shared_dst, const void* global_src, unsigned copy_bytes, unsigned src_bytes) {
  SimThread& thread = require_thread("cp.async");
  MT_CHECK(copy_bytes == 4 || copy_bytes == 8 || copy_bytes == 16, "cp.async copies 4, 8 or 16 bytes, not {}",
           copy_bytes);
  MT_CHECK(src_bytes <= copy_bytes, "cp.async: src-size {} exceeds cp-size {}", src_bytes, copy_bytes);
  MT_CHECK(reinterpret_cast<std::uintptr_t>(shared_dst) % copy_bytes == 0 &&
               reinterpret_cast<std::uintptr_t>(global_src) % copy_bytes == 0,
           "cp.async of {} bytes needs {}-byte aligned addresses (dst {}, src {})", copy_bytes, copy_bytes, shared_dst,
           global_src);
  thread.uncommitted.push_back({shared_dst, global_src, copy_bytes, src_bytes});
}

void cp_async_commit_group() {
  SimThread& thread = require_thread("cp.async.commit_group");
  thread.committed.push_back(std::move(thread.uncommitted));
  thread.uncommitted.clear();
}

void cp_async_wait_group(unsigned groups_left_pending) {
  SimThread& thread = require_thread("cp.async.wait_group");
  while (thread.committed.size() > groups_left_pending) {
    for (const PendingCopy& copy : thread.committed.front()) {
      // Bytes past src-size are zero-filled, as the hardware does.
      std::memcpy(copy.dst, copy.src, copy.src_bytes);
      std::memset(static_cast<std::byte*>(copy.dst) + copy.src_bytes, 0, copy.copy_bytes - copy.src_bytes);
      note_memory_access(copy.dst, copy.copy_bytes, true);
    }
    thread.committed.pop_front();
  }
}

// ---- mbarrier and bulk copies ----------------------------------------------------

namespace {
// A copy engine write lands whenever it likes between issue and completion.
// The simulator lands it as late as it can (a read before the barrier wait
// sees what was there) and overwrites the destination with all-ones bytes at
// issue, so whatever still reads the old contents after the copy was issued
// (a tile refilled too early) reads garbage here too, not a lucky old value.
void poison_until_landed(void* shared_dst, std::size_t bytes) { std::memset(shared_dst, 0xff, bytes); }
}  // namespace

void mbarrier_init(void* barrier, unsigned expected_arrivals) {
  require_thread("mbarrier.init");
  MT_CHECK(reinterpret_cast<std::uintptr_t>(barrier) % 8 == 0, "mbarrier.init: the barrier at {} is not 8-byte aligned",
           barrier);
  MT_CHECK(expected_arrivals >= 1 && expected_arrivals <= 0x7fffu,
           "mbarrier.init: {} expected arrivals (the simulator takes 1..32767)", expected_arrivals);
  MbarrierState s{0, static_cast<std::uint16_t>(expected_arrivals), static_cast<std::uint16_t>(expected_arrivals)};
  std::memcpy(barrier, &s, sizeof(s));
}

void mbarrier_arrive(void* barrier, unsigned expect_tx_bytes) {
  require_thread("mbarrier.arrive");
  MbarrierState s = read_mbarrier(barrier);
  MT_CHECK(s.expected != 0, "mbarrier.arrive on {}: the barrier was never initialised", barrier);
  MT_CHECK(s.pending() > 0, "mbarrier.arrive on {}: more arrivals than the {} the phase expects", barrier, s.expected);
  s.tx += static_cast<std::int32_t>(expect_tx_bytes);
  s.pending_and_phase = static_cast<std::uint16_t>((s.phase() << 15) | (s.pending() - 1));
  settle_mbarrier(barrier, s);
}

void mbarrier_wait_parity(void* barrier, unsigned parity, SourceSite site) {
  SimThread& thread = require_thread("mbarrier.try_wait.parity");
  MT_CHECK(read_mbarrier(barrier).expected != 0, "mbarrier.try_wait on {}: the barrier was never initialised", barrier);
  if (read_mbarrier(barrier).phase() != (parity & 1u)) return;  // that phase is already over
  thread.state = ThreadState::AtMbarrier;
  thread.site = site;
  thread.mbarrier = barrier;
  thread.parity = parity & 1u;
  BlockRun::wait(thread);
}

void bulk_copy_global_to_shared(void* shared_dst, const void* global_src, unsigned bytes, void* barrier) {
  require_thread("cp.async.bulk");
  MT_CHECK(bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(shared_dst) % 16 == 0 &&
               reinterpret_cast<std::uintptr_t>(global_src) % 16 == 0,
           "cp.async.bulk: {} bytes from {} to {}: sizes and addresses must be multiples of 16", bytes, global_src,
           shared_dst);
  poison_until_landed(shared_dst, bytes);
  current_block->queue_bulk_copy({[=] { std::memcpy(shared_dst, global_src, bytes); }, bytes, {barrier}});
}

// ---- tensor maps, wgmma, fences ---------------------------------------------------

void encode_tensor_map(void* map, const TensorMapEncoding& encoding) {
  static_assert(sizeof(TensorMapEncoding) <= 128, "a tensor map is 128 bytes");
  MT_CHECK(reinterpret_cast<std::uintptr_t>(map) % 64 == 0, "tensor map at {}: not 64-byte aligned", map);
  hopper::check_tensor_map(encoding);
  std::memset(map, 0, 128);
  std::memcpy(map, &encoding, sizeof(encoding));
}

void tensor_copy_global_to_shared(void* shared_dst, const void* map, const std::int32_t* coords, void* barrier) {
  require_thread("cp.async.bulk.tensor");
  const TensorMapEncoding encoding = hopper::read_tensor_map(map);
  MT_CHECK(reinterpret_cast<std::uintptr_t>(shared_dst) % 128 == 0,
           "cp.async.bulk.tensor: the shared destination {} is not 128-byte aligned", shared_dst);
  const std::int32_t at[3] = {coords[0], encoding.rank > 1 ? coords[1] : 0, encoding.rank > 2 ? coords[2] : 0};
  auto* dst = static_cast<std::byte*>(shared_dst);
  poison_until_landed(dst, hopper::box_bytes(encoding));
  current_block->queue_bulk_copy(
      {[=] { hopper::land_tensor_tile(dst, encoding, at); }, hopper::box_bytes(encoding), {barrier}});
}

// ---- clusters ----------------------------------------------------------------------

unsigned cluster_ctarank() { return require_block("%cluster_ctarank").rank(); }

unsigned cluster_size() { return static_cast<unsigned>(require_block("%cluster_nctarank").cluster().size()); }

void* map_shared_rank(const void* shared, unsigned rank) {
  BlockRun& block = require_block("mapa");
  MT_CHECK(rank < block.cluster().size(), "mapa: rank {} in a cluster of {} blocks", rank, block.cluster().size());
  const auto* p = static_cast<const std::byte*>(shared);
  MT_CHECK(p >= block.dynamic_shared() && p < block.dynamic_shared() + block.dynamic_shared_bytes(),
           "mapa: {} is not in this block's dynamic shared memory (the simulator maps only that)", shared);
  return block.cluster().block(rank).dynamic_shared() + (p - block.dynamic_shared());
}

void cluster_sync(SourceSite site) {
  SimThread& thread = require_thread("barrier.cluster");
  thread.state = ThreadState::AtClusterBarrier;
  thread.site = site;
  BlockRun::wait(thread);
}

void tensor_copy_multicast(void* shared_dst, const void* map, const std::int32_t* coords, void* barrier,
                           std::uint16_t cta_mask) {
  BlockRun& block = require_block("cp.async.bulk.tensor.multicast");
  const TensorMapEncoding encoding = hopper::read_tensor_map(map);
  MT_CHECK(reinterpret_cast<std::uintptr_t>(shared_dst) % 128 == 0,
           "cp.async.bulk.tensor: the shared destination {} is not 128-byte aligned", shared_dst);
  MT_CHECK(cta_mask != 0 && (cta_mask >> block.cluster().size()) == 0,
           "cp.async.bulk.tensor.multicast: cta mask 0x{:x} for a cluster of {} blocks", cta_mask,
           block.cluster().size());
  const std::int32_t at[3] = {coords[0], encoding.rank > 1 ? coords[1] : 0, encoding.rank > 2 ? coords[2] : 0};
  std::vector<std::byte*> destinations;
  std::vector<void*> barriers;
  for (unsigned rank = 0; rank < block.cluster().size(); ++rank) {
    if (((cta_mask >> rank) & 1u) == 0) continue;
    destinations.push_back(static_cast<std::byte*>(map_shared_rank(shared_dst, rank)));
    barriers.push_back(map_shared_rank(barrier, rank));
    poison_until_landed(destinations.back(), hopper::box_bytes(encoding));
  }
  block.queue_bulk_copy({[=] {
                           for (std::byte* dst : destinations) hopper::land_tensor_tile(dst, encoding, at);
                         },
                         hopper::box_bytes(encoding), barriers});
}

std::uint32_t shared_window_address(const void* shared) {
  require_thread("__cvta_generic_to_shared");
  const std::byte* base = current_block->dynamic_shared();
  const auto* p = static_cast<const std::byte*>(shared);
  MT_CHECK(p >= base && p < base + current_block->dynamic_shared_bytes(),
           "shared address of {}: the simulator maps only dynamic shared memory into the shared window", shared);
  return static_cast<std::uint32_t>(p - base);
}

void wgmma_fence() { require_thread("wgmma.fence"); }

namespace {
std::atomic<int> fp8_accumulator_significand_bits{0};
}  // namespace

void set_fp8_accumulator_bits(int significand_bits) {
  MT_CHECK(significand_bits >= 0 && significand_bits <= 24, "set_fp8_accumulator_bits({}): expected 0..24",
           significand_bits);
  fp8_accumulator_significand_bits = significand_bits;
}

int fp8_accumulator_bits() { return fp8_accumulator_significand_bits; }

void wgmma_mma_async(const WgmmaIssue& issue) {
  SimThread& thread = require_thread("wgmma.mma_async");
  MT_CHECK(current_block->thread_count() % 128 == 0,
           "wgmma.mma_async: the block has {} threads; wgmma runs on whole warpgroups of 128",
           current_block->thread_count());
  MT_CHECK(issue.n >= 8 && issue.n <= 256 && issue.n % 8 == 0, "wgmma.mma_async: N = {} (8..256, a multiple of 8)",
           issue.n);
  const bool fp8_a = issue.a_type == WgmmaType::E4M3 || issue.a_type == WgmmaType::E5M2;
  const bool fp8_b = issue.b_type == WgmmaType::E4M3 || issue.b_type == WgmmaType::E5M2;
  MT_CHECK(fp8_a == fp8_b && (fp8_a || issue.a_type == issue.b_type),
           "wgmma.mma_async: operand types must be both f16, both bf16 or both FP8 (e4m3/e5m2 in any pair)");
  MT_CHECK(!fp8_a || (!issue.trans_a && !issue.trans_b),
           "wgmma.mma_async: FP8 operands must both be K-major (the PTX ISA has no transpose for 8-bit types)");
  hopper::QueuedWgmma queued{issue, current_block->dynamic_shared(), current_block->dynamic_shared_bytes(),
                             (thread.linear / 32) % 4};
  if (thread.linear % 32 == 0) queued.issued_checksum = hopper::operand_checksum(queued);
  thread.wgmma.uncommitted.push_back(queued);
}

void wgmma_commit_group() {
  SimThread& thread = require_thread("wgmma.commit_group");
  thread.wgmma.committed.push_back(std::move(thread.wgmma.uncommitted));
  thread.wgmma.uncommitted.clear();
}

void wgmma_wait_group(unsigned groups_left_pending, SourceSite site) {
  SimThread& thread = require_thread("wgmma.wait_group");
  warp_sync("wgmma.wait_group", hopper::wgmma_retire, 0xffffffffu, &thread.wgmma, nullptr, groups_left_pending, site);
}

}  // namespace mt::simulator
