// The SIMT simulator's runtime: what a kernel compiled with MT_SIM calls into.
//
// How it works, in one paragraph. A kernel launch runs its blocks one after
// another (or one block per worker thread, MT_SIM_THREADS=N). Inside a block,
// every CUDA thread is a cooperative fiber (Boost.Context: a user-space stack
// switch of a few nanoseconds, no system call). A fiber runs until it reaches
// something that needs other threads — __syncthreads(), a warp shuffle or
// vote, mma/ldmatrix — and then yields to the block's scheduler. When every
// thread of the block is waiting, the scheduler completes what can complete
// (a warp op whose lanes have all arrived, a barrier every thread reached) and
// resumes those threads. When nothing can complete, the block is deadlocked and
// the launch throws mt::Error naming the kernel, the block, and where each
// thread is stuck — instead of hanging like the GPU would.
//
// Shared memory: `__shared__` variables are `static thread_local`, and a
// worker thread runs one block at a time, so each running block has its own
// copy (the HIP-CPU approach). Dynamic shared memory is a per-worker arena.
//
// Kernel code never includes this file directly: it includes
// runtime/cuda_compat.h, which maps CUDA's names onto these functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/sim/source_site.h"

namespace mt::simulator {

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT: like CUDA's
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}                                         // NOLINT: like CUDA's
  constexpr unsigned count() const { return x * y * z; }
};

// What kernel code reads as threadIdx, blockIdx, blockDim and gridDim. They are
// per-OS-thread variables that the scheduler rewrites on every switch, so they
// are also real variables a debugger can print and use in a breakpoint
// condition: `break kernel.cu:42 if mt::simulator::threadIdx.x == 5`.
extern thread_local constinit uint3 threadIdx;
extern thread_local constinit uint3 blockIdx;
extern thread_local constinit dim3 blockDim;
extern thread_local constinit dim3 gridDim;

// ---- host side: launching ---------------------------------------------------

struct KernelLaunch {
  const char* kernel_name = "?";
  dim3 grid;
  dim3 block;
  std::size_t dynamic_shared_bytes = 0;
  // Thread block clusters (sm_90): blocks of one cluster run together and
  // may use each other's dynamic shared memory (see "clusters" below).
  dim3 cluster;
  // Runs the kernel body once for the calling (simulated) thread.
  void (*run_thread)(const void* context) = nullptr;
  const void* context = nullptr;
};

// Runs every block of the launch to completion. Throws mt::Error on an invalid
// configuration, a deadlock, or an exception thrown by kernel code.
void run_kernel(const KernelLaunch& launch);

// Worker threads used for blocks: MT_SIM_THREADS (default 1; 0 = all cores).
int worker_threads();
void set_worker_threads(int count);

// Stack size of one simulated thread: MT_SIM_STACK_KB (default 64).
std::size_t fiber_stack_bytes();

// Number of fiber switches performed so far in this process (for benchmarks).
std::uint64_t context_switch_count();

// ---- graph capture (the simulator's cudaStreamBeginCapture) -------------------
//
// While a stream is being captured, work queued on it is recorded instead of
// run: the launch helper copies the kernel's arguments into a recorded node,
// exactly as cudaStreamBeginCapture turns launches into graph nodes, and
// nothing executes until the graph is replayed. Work on other streams runs as
// usual; a launch on the default stream (0) during a capture is an error, as
// the legacy default stream is on a GPU. One capture at a time per process.
struct CapturedWork {
  struct Node {
    std::string name;  // the kernel, or "memcpy"
    std::function<void()> run;
  };
  std::vector<Node> nodes;
};

void begin_capture(std::uint64_t stream);
// Ends the capture and returns what was recorded (also on a failed capture:
// the caller discards it).
std::shared_ptr<const CapturedWork> end_capture();
// True when work for `stream` must be recorded (captured or deferred, below);
// throws mt::Error (naming `what`) for the default stream during a capture.
bool records_work(std::uint64_t stream, const char* what);
// Records `run` for `stream`: into the capture, or onto the stream's held work.
void record_node(std::uint64_t stream, const char* name, std::function<void()> run);
// Runs the recorded nodes in order.
void replay(const CapturedWork& work);

// ---- deferred streams (stream-order checking) ---------------------------------
//
// The simulator runs each launch before returning, so on it every stream is
// already in order with every other: a missing Stream::wait cannot show. While
// deferral is on, work queued on a stream of its own (not the default stream
// 0) is held on that stream and runs only when something needs it: a stream
// waiting for an event recorded after it (Stream::wait queues that dependency
// on a deferred stream and honours it at once on the default one), the host
// waiting (Event::synchronize/query, Stream::synchronize, synchronize(device)),
// or the end of deferral. Work that forgets to wait then reads what is not yet
// written, and a test sees wrong numbers instead of a lucky order. When the
// whole device is synchronized, held streams run one after another, each to
// its end, in the order asked for: both orders catch a missing wait whichever
// stream it is on. The host must synchronize before it reads device memory.
// One deferral at a time per process, never during a graph capture.
enum class FlushOrder { OldestStreamFirst, NewestStreamFirst };
void begin_deferred_streams(FlushOrder order);
void end_deferred_streams();  // runs all held work first
bool defers(std::uint64_t stream);
// How much work `stream` has been given so far: an event's position.
std::uint64_t deferred_position(std::uint64_t stream);
// Runs `stream`'s held work up to `position` (no-op when it already ran).
void run_deferred_until(std::uint64_t stream, std::uint64_t position);
void run_all_deferred();

// ---- race checking (MT_SIM_RACECHECK=1) ---------------------------------------

struct RaceReport {
  std::string kernel;
  dim3 block;
  std::string kind;     // "read-after-write", "write-after-read" or "write-after-write"
  uint3 first_thread;   // the earlier access
  uint3 second_thread;  // the later, conflicting one
  std::uintptr_t address = 0;
  std::string where;  // "dynamic shared memory offset 12" / "static shared memory"
};

bool racecheck_enabled();  // MT_SIM_RACECHECK, or the last set_racecheck_enabled
void set_racecheck_enabled(bool enabled);
// Reports found so far (each is also printed to stderr), cleared by the call.
std::vector<RaceReport> take_race_reports();

// ---- device side: what the intrinsics call ------------------------------------

// __syncthreads(): wait until every thread of the block reaches this barrier.
void syncthreads(SourceSite site);

// A warp-synchronous operation. Each lane in `mask` deposits a pointer to its
// input and to its output, then waits; once every lane in the mask has arrived
// at the same operation (same `complete` function, mask and op_arg), the
// scheduler calls complete() once with all 32 lanes' pointers (lanes outside
// the mask have null pointers) and resumes them. This is how shuffles, votes,
// __syncwarp, ldmatrix and mma are simulated.
struct WarpLane {
  const void* input = nullptr;
  void* output = nullptr;
};
using WarpCompleteFn = void (*)(unsigned mask, const WarpLane* lanes, std::uint64_t op_arg);
void warp_sync(const char* op_name, WarpCompleteFn complete, unsigned mask, const void* input, void* output,
               std::uint64_t op_arg, SourceSite site);

// __activemask(): the lanes of this warp that reach this same call before the
// warp can make no further progress (lanes in another branch are inactive).
unsigned active_mask(SourceSite site);

unsigned lane_id();
void* dynamic_shared_memory();

// cp.async: queued per thread, performed when a later wait retires its group,
// so a kernel that reads the destination before waiting sees stale data here too.
void cp_async(void* shared_dst, const void* global_src, unsigned copy_bytes, unsigned src_bytes);
void cp_async_commit_group();
void cp_async_wait_group(unsigned groups_left_pending);

// ---- Hopper's asynchronous barrier and bulk copies (sm_90) ----------------------
//
// mbarrier: an 8-byte object in shared memory with a phase bit, a pending
// arrival count (reset to the expected count at each phase), and a
// transaction count (tx) of bytes still to land. A phase completes when the
// pending arrivals and tx both reach 0; the phase bit then flips. The state
// lives in the 8 bytes themselves (the simulator's own encoding; the
// hardware's is opaque), so re-initialising is a plain init.
void mbarrier_init(void* barrier, unsigned expected_arrivals);
// One arrival, after adding `expect_tx_bytes` to the transactions the phase waits for.
void mbarrier_arrive(void* barrier, unsigned expect_tx_bytes);
// Waits until the phase of parity `parity` has completed (the barrier's phase
// bit differs from it), which try_wait.parity may report at any later poll;
// the simulated thread sleeps instead of spinning. Throws on a deadlock.
void mbarrier_wait_parity(void* barrier, unsigned parity, SourceSite site);
// cp.async.bulk global -> shared, completing `bytes` of the barrier's tx when
// it lands. It lands as late as it can: when no simulated thread of the block
// can run otherwise; until then the destination holds all-ones bytes (NaN,
// -1), written at issue. So a kernel that reads the destination before
// waiting on the barrier, or still reads the old contents after issuing the
// copy, gets garbage here, as it may on a GPU.
void bulk_copy_global_to_shared(void* shared_dst, const void* global_src, unsigned bytes, void* barrier);

// ---- Hopper's tensor-map copies (TMA), wgmma and fences (sm_90) ------------------
//
// A tensor map describes a tiled view of a global tensor (what
// cuTensorMapEncodeTiled encodes into an opaque 128-byte CUtensorMap); the
// simulator keeps its own encoding in those 128 bytes. A copy moves one box
// (a tile, innermost dimension first) into shared memory, densely, rows of
// box[0] elements, zero-filling what lies outside the tensor, swizzled like
// the hardware: 16-byte chunk c of the 128-byte row r (with 128B swizzle)
// lands at chunk c ^ (r % 8), as address bits [4,7) ^= bits [7,10). It
// counts its whole box (zero fill included) against the barrier's tx, and
// lands as late as it can, poisoning the destination at issue, like
// cp.async.bulk.
struct TensorMapEncoding {
  static constexpr std::uint64_t kMagic = 0x70614d726f736e54ull;  // "TnsorMap": catches an unencoded map
  std::uint64_t magic = kMagic;
  const void* global_address = nullptr;
  std::uint32_t rank = 0;                // 1..3
  std::uint32_t element_bytes = 0;       // 1, 2, 4 or 8
  std::uint64_t dims[3] = {1, 1, 1};     // elements, innermost first
  std::uint64_t strides[3] = {0, 0, 0};  // bytes between consecutive indices; strides[0] = element_bytes
  std::uint32_t box[3] = {1, 1, 1};      // the tile, innermost first
  std::uint32_t swizzle_bytes = 0;       // 0 (none), 32, 64 or 128
};
// Checks `encoding` as the driver does (alignment, strides, box sizes) and
// writes it into the 128 bytes at `map` (throws mt::Error when invalid).
void encode_tensor_map(void* map, const TensorMapEncoding& encoding);
// cp.async.bulk.tensor.{1,2,3}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.
void tensor_copy_global_to_shared(void* shared_dst, const void* map, const std::int32_t* coords, void* barrier);

// The offset of a dynamic shared memory address in the block's shared window
// (what __cvta_generic_to_shared gives on a GPU); wgmma descriptors hold it.
std::uint32_t shared_window_address(const void* shared);

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16} and
// .m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}: a warpgroup (4 consecutive warps)
// multiplies a 64 x K A by a K x N B (K = 16 for 16-bit operands, 32 for
// FP8, whose operands must both be K-major), both described by shared-memory
// matrix descriptors, into f32 accumulators spread over its 128 threads
// (`d`: N / 2 floats per thread). Queued per thread; it writes `d`
// only when wgmma.wait_group retires its group, so a kernel that reads the
// accumulators too early sees old values. The hardware may read the tiles at
// any moment in between: the simulator reads them at retire and checks they
// are what they were at issue, reporting a change (a copy still landing, a
// tile refilled too early) as an error instead of a lucky result.
enum class WgmmaType : std::uint8_t { F16, BF16, E4M3, E5M2 };
struct WgmmaIssue {
  float* d = nullptr;
  unsigned n = 0;
  std::uint64_t desc_a = 0, desc_b = 0;
  bool accumulate = true;  // scale-d: D = A*B + D, or D = A*B
  bool trans_a = false;    // A is M-major (else K-major)
  bool trans_b = false;    // B is N-major (else K-major)
  WgmmaType a_type = WgmmaType::F16, b_type = WgmmaType::F16;
};
// The FP8 accumulation model. Hopper's FP8 Tensor Cores do not add into the
// f32 accumulator with full f32 precision: DeepSeek-V3 measured about 14
// bits kept on H800, a 2% largest error at K = 4096 unless partial sums are
// promoted to f32 registers every 128 of K. With `significand_bits` > 0 the
// simulator models that: after each FP8 wgmma (k32) it truncates every
// accumulator it wrote to that many significand bits (toward zero). 0 (the
// default) keeps full f32: a model, off unless a test turns it on.
void set_fp8_accumulator_bits(int significand_bits);
int fp8_accumulator_bits();
void wgmma_fence();
void wgmma_mma_async(const WgmmaIssue& issue);
void wgmma_commit_group();
void wgmma_wait_group(unsigned groups_left_pending, SourceSite site);

// ---- thread block clusters (sm_90) ----------------------------------------------
//
// A launch with cluster dims (1..16 blocks, dividing the grid) runs each
// cluster's blocks together, interleaved pass by pass on one worker thread.
// Each block has its own dynamic shared memory, which the others reach
// through map_shared_rank (PTX mapa): mbarriers there take remote arrivals,
// and a multicast TMA copy lands in several blocks at once. Static
// __shared__ variables are per worker thread, so in a cluster launch they
// would be shared by the cluster's blocks: keep shared state in dynamic
// shared memory there. The race checker is off for cluster launches.
unsigned cluster_ctarank();  // this block's rank in its cluster
unsigned cluster_size();
// The address of the same offset of `shared` (this block's dynamic shared
// memory) in the block of rank `rank` of the cluster.
void* map_shared_rank(const void* shared, unsigned rank);
// barrier.cluster.arrive + wait: every thread of every block of the cluster.
void cluster_sync(SourceSite site);
// cp.async.bulk.tensor ... .multicast::cluster: the box lands at the same
// offset in every block of `cta_mask` (bit r = rank r) and completes its
// bytes on the mbarrier at the same offset in each.
void tensor_copy_multicast(void* shared_dst, const void* map, const std::int32_t* coords, void* barrier,
                           std::uint16_t cta_mask);

// Tells the race checker about an access the compiler did not instrument
// (ldmatrix rows, cp.async destinations).
void note_memory_access(const void* address, std::size_t bytes, bool is_write);

}  // namespace mt::simulator
