// Kernels that exercise one simulator feature each. Built for the simulator
// only (SIM_ONLY): several are broken on purpose.
#include "runtime/launch.h"
#include "kernels/common/ptx_hopper.h"
#include "tests/runtime/sim/sim_test_kernels.h"

namespace mt::sim::test {

namespace {
dim3 to_dim3(Dim d) { return dim3(d.x, d.y, d.z); }
}  // namespace

// ---- indices and barriers ---------------------------------------------------------

__global__ void thread_indices_kernel(unsigned* out) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned* slot = out + 12 * (block * threads + local);
  const unsigned values[12] = {threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
                               blockDim.x,  blockDim.y,  blockDim.z,  gridDim.x,  gridDim.y,  gridDim.z};
  for (int i = 0; i < 12; ++i) slot[i] = values[i];
}

void thread_indices(Dim grid, Dim block, unsigned* out) {
  launch("thread_indices_kernel", thread_indices_kernel, to_dim3(grid), to_dim3(block), 0, Stream{}, out);
}

__global__ void barrier_neighbour_kernel(int* out) {
  __shared__ int values[1024];
  const int t = static_cast<int>(threadIdx.x);
  values[t] = t;
  __syncthreads();
  // Without the barrier, thread t would read values[t+1] before it was written.
  const int next = (t + 1) % static_cast<int>(blockDim.x);
  out[t] = values[next] + (next == 0 ? static_cast<int>(blockDim.x) : 0);
}

void barrier_neighbour(int threads, int* out) {
  launch("barrier_neighbour_kernel", barrier_neighbour_kernel, dim3(1), dim3(threads), 0, Stream{}, out);
}

// ---- warp shuffles and votes ------------------------------------------------------------

__global__ void shuffle_kernel(int kind, unsigned mask, int lane_arg, int width, int* out) {
  const unsigned lane = threadIdx.x;
  if (((mask >> lane) & 1u) == 0) {
    out[lane] = -1;
    return;
  }
  const int value = 100 + static_cast<int>(lane);
  int result = 0;
  switch (kind) {
    case 0: result = __shfl_sync(mask, value, lane_arg, width); break;
    case 1: result = __shfl_up_sync(mask, value, static_cast<unsigned>(lane_arg), width); break;
    case 2: result = __shfl_down_sync(mask, value, static_cast<unsigned>(lane_arg), width); break;
    default: result = __shfl_xor_sync(mask, value, lane_arg, width); break;
  }
  out[lane] = result;
}

void shuffle(Shuffle kind, unsigned mask, int lane_arg, int width, int* out) {
  launch("shuffle_kernel", shuffle_kernel, dim3(1), dim3(32), 0, Stream{}, static_cast<int>(kind), mask, lane_arg,
         width, out);
}

__global__ void votes_kernel(unsigned mask, int modulus, unsigned* out) {
  const unsigned lane = threadIdx.x;
  if (((mask >> lane) & 1u) == 0) return;
  const int predicate = (static_cast<int>(lane) % modulus) == 0;
  out[lane * 3 + 0] = __ballot_sync(mask, predicate);
  out[lane * 3 + 1] = static_cast<unsigned>(__any_sync(mask, predicate));
  out[lane * 3 + 2] = static_cast<unsigned>(__all_sync(mask, predicate));
}

void votes(unsigned mask, int modulus, unsigned* out) {
  launch("votes_kernel", votes_kernel, dim3(1), dim3(32), 0, Stream{}, mask, modulus, out);
}

__global__ void active_mask_kernel(int active_lanes, unsigned* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < active_lanes) {
    out[lane] = __activemask();
  } else {
    out[lane] = __activemask();
  }
}

void active_mask_in_branch(int active_lanes, unsigned* out) {
  launch("active_mask_kernel", active_mask_kernel, dim3(1), dim3(32), 0, Stream{}, active_lanes, out);
}

// ---- atomics ---------------------------------------------------------------------------

__global__ void atomics_kernel(AtomicResults* out) {
  const unsigned global = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&out->int_sum, 1);
  atomicAdd(&out->float_sum, 0.5f);
  atomicMax(&out->max_value, global);
  atomicMin(&out->min_value, -static_cast<int>(global));
  // A CAS loop: the classic way to build any atomic from atomicCAS.
  unsigned long long seen = out->cas_counter;
  for (;;) {
    const unsigned long long previous = atomicCAS(&out->cas_counter, seen, seen + 2);
    if (previous == seen) break;
    seen = previous;
  }
  atomicExch(&out->exch_last, 7);
  atomicOr(&out->or_bits, 1u << (global % 32));
}

void atomics(int blocks, int threads, AtomicResults* out) {
  launch("atomics_kernel", atomics_kernel, dim3(blocks), dim3(threads), 0, Stream{}, out);
}

// ---- shared memory ---------------------------------------------------------------------------

__global__ void shared_memory_kernel(int dynamic_ints, int* out) {
  __shared__ int static_sum;
  MT_DYNAMIC_SHARED(int, dynamic);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) static_sum = 0;
  for (int i = t; i < dynamic_ints; i += static_cast<int>(blockDim.x)) dynamic[i] = static_cast<int>(blockIdx.x);
  __syncthreads();
  atomicAdd(&static_sum, static_cast<int>(blockIdx.x));
  __syncthreads();
  if (t == 0) {
    int ok = static_sum == static_cast<int>(blockIdx.x * blockDim.x);
    for (int i = 0; i < dynamic_ints; ++i) ok = ok && dynamic[i] == static_cast<int>(blockIdx.x);
    out[blockIdx.x] = ok;
  }
}

void shared_memory(int blocks, int threads, std::size_t dynamic_bytes, int* out) {
  launch("shared_memory_kernel", shared_memory_kernel, dim3(blocks), dim3(threads), dynamic_bytes, Stream{},
         static_cast<int>(dynamic_bytes / sizeof(int)), out);
}

// ---- broken kernels ------------------------------------------------------------------------

__global__ void early_return_kernel(int n) {
  if (static_cast<int>(threadIdx.x) >= n) return;  // the classic bug
  __syncthreads();
}
void early_return_before_barrier() {
  launch("early_return_kernel", early_return_kernel, dim3(2), dim3(64), 0, Stream{}, 40);
}

__global__ void divergent_barriers_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}
void divergent_barriers() {
  launch("divergent_barriers_kernel", divergent_barriers_kernel, dim3(1), dim3(32), 0, Stream{});
}

__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0);
}
void shuffle_with_exited_lane() {
  int out[32] = {};
  launch("exited_lane_kernel", exited_lane_kernel, dim3(1), dim3(32), 0, Stream{}, out);
}

__global__ void mask_without_own_lane_kernel() { (void)__ballot_sync(0x1u << ((threadIdx.x + 1) % 32), 1); }
void mask_without_own_lane() {
  launch("mask_without_own_lane_kernel", mask_without_own_lane_kernel, dim3(1), dim3(32), 0, Stream{});
}

// ---- race checking ----------------------------------------------------------------------

__global__ void racy_neighbour_kernel(float* out) {
  __shared__ float tile[64];
  const unsigned t = threadIdx.x;
  tile[t] = static_cast<float>(t);
  // Missing __syncthreads(): thread t reads what thread t+1 may not have written.
  out[t] = tile[(t + 1) % 64];
}
void racy_neighbour(float* out) {
  launch("racy_neighbour_kernel", racy_neighbour_kernel, dim3(1), dim3(64), 0, Stream{}, out);
}

__global__ void fixed_neighbour_kernel(float* out) {
  __shared__ float tile[64];
  const unsigned t = threadIdx.x;
  tile[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = tile[(t + 1) % 64];
}
void fixed_neighbour(float* out) {
  launch("fixed_neighbour_kernel", fixed_neighbour_kernel, dim3(1), dim3(64), 0, Stream{}, out);
}

__global__ void warp_exchange_kernel(float* out) {
  __shared__ float tile[64];
  const unsigned t = threadIdx.x;
  tile[t] = static_cast<float>(t);
  __syncwarp();  // orders the lanes of one warp; enough because we stay in the warp
  out[t] = tile[(t & ~31u) + ((t + 1) % 32)];
}
void warp_exchange_with_syncwarp(float* out) {
  launch("warp_exchange_kernel", warp_exchange_kernel, dim3(1), dim3(64), 0, Stream{}, out);
}

__global__ void racy_dynamic_kernel(float* out) {
  MT_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x;
  if (t == 0) tile[5] = 1.0f;
  out[t] = tile[5];  // thread 0 wrote, everyone reads, no barrier
}
void racy_dynamic(float* out) {
  launch("racy_dynamic_kernel", racy_dynamic_kernel, dim3(1), dim3(32), 64 * sizeof(float), Stream{}, out);
}

// ---- Tensor Core wrappers ------------------------------------------------------------------

namespace {
// Fragments straight from the PTX ISA tables (group = lane/4, t = lane%4).
__device__ void load_a_fragment(const std::uint16_t* a, unsigned lane, std::uint32_t (&frag)[4]) {
  const unsigned group = lane / 4, t = lane % 4;
  for (int reg = 0; reg < 4; ++reg) {
    const unsigned row = group + ((reg % 2) == 1 ? 8 : 0);
    const unsigned col = 2 * t + (reg >= 2 ? 8 : 0);
    frag[reg] = ptx::pack_halves(a[row * 16 + col], a[row * 16 + col + 1]);
  }
}
__device__ void load_b_fragment(const std::uint16_t* b, unsigned lane, std::uint32_t (&frag)[2]) {
  const unsigned group = lane / 4, t = lane % 4;
  for (int reg = 0; reg < 2; ++reg) {
    const unsigned k = 2 * t + (reg == 1 ? 8 : 0);
    frag[reg] = ptx::pack_halves(b[k * 8 + group], b[(k + 1) * 8 + group]);
  }
}
__device__ unsigned c_index(unsigned lane, int i) {
  return (lane / 4 + (i >= 2 ? 8 : 0)) * 8 + 2 * (lane % 4) + (i & 1);
}
}  // namespace

__global__ void mma_kernel(int bf16, const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d) {
  const unsigned lane = threadIdx.x;
  std::uint32_t a_frag[4];
  std::uint32_t b_frag[2];
  float acc[4];
  load_a_fragment(a, lane, a_frag);
  load_b_fragment(b, lane, b_frag);
  for (int i = 0; i < 4; ++i) acc[i] = c[c_index(lane, i)];
  if (bf16 != 0) {
    ptx::mma_m16n8k16_bf16(acc, a_frag, b_frag, acc);
  } else {
    ptx::mma_m16n8k16_f16(acc, a_frag, b_frag, acc);
  }
  for (int i = 0; i < 4; ++i) d[c_index(lane, i)] = acc[i];
}

void mma_f16(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d) {
  launch("mma_kernel", mma_kernel, dim3(1), dim3(32), 0, Stream{}, 0, a, b, c, d);
}
void mma_bf16(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d) {
  launch("mma_kernel", mma_kernel, dim3(1), dim3(32), 0, Stream{}, 1, a, b, c, d);
}

__global__ void ldmatrix_kernel(int matrices, int trans, const std::uint16_t* src, std::uint32_t* out) {
  __shared__ __align__(16) std::uint16_t tile[4 * 64];
  const unsigned lane = threadIdx.x;
  for (int i = static_cast<int>(lane); i < matrices * 64; i += 32) tile[i] = src[i];
  __syncwarp();
  // Lane 8m + r names row r of matrix m; extra lanes repeat a valid row.
  const std::uint16_t* row = tile + (lane % (8u * static_cast<unsigned>(matrices))) * 8;
  std::uint32_t regs[4] = {0, 0, 0, 0};
  if (matrices == 1) {
    std::uint32_t r[1];
    trans ? ptx::ldmatrix_x1_trans(r, row) : ptx::ldmatrix_x1(r, row);
    regs[0] = r[0];
  } else if (matrices == 2) {
    std::uint32_t r[2];
    trans ? ptx::ldmatrix_x2_trans(r, row) : ptx::ldmatrix_x2(r, row);
    regs[0] = r[0];
    regs[1] = r[1];
  } else {
    std::uint32_t r[4];
    trans ? ptx::ldmatrix_x4_trans(r, row) : ptx::ldmatrix_x4(r, row);
    for (int i = 0; i < 4; ++i) regs[i] = r[i];
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = regs[i];
}

void ldmatrix(int matrices, bool trans, const std::uint16_t* src, std::uint32_t* out) {
  launch("ldmatrix_kernel", ldmatrix_kernel, dim3(1), dim3(32), 0, Stream{}, matrices, trans ? 1 : 0, src, out);
}

// ---- cp.async -----------------------------------------------------------------------------

__global__ void cp_async_kernel(const float* src, float* out) {
  __shared__ __align__(16) float staged[8];
  for (int i = 0; i < 8; ++i) staged[i] = -1.0f;
  ptx::cp_async_cg16(staged, src);
  ptx::cp_async_ca<16>(staged + 4, src + 4, 4);  // only 4 bytes read, 12 zero-filled
  ptx::cp_async_commit_group();
  for (int i = 0; i < 4; ++i) out[i] = staged[i];  // not waited for yet: stale
  ptx::cp_async_wait_group<0>();
  for (int i = 0; i < 4; ++i) out[4 + i] = staged[i];
  for (int i = 0; i < 4; ++i) out[8 + i] = staged[4 + i];
}
void cp_async_staging(const float* src, float* out) {
  launch("cp_async_kernel", cp_async_kernel, dim3(1), dim3(1), 0, Stream{}, src, out);
}

// ---- mbarrier and cp.async.bulk ---------------------------------------------------------------

__global__ void bulk_copy_read_before_wait_kernel(const float* src, float* early, float* late, unsigned tx_bytes,
                                                  unsigned copy_bytes) {
  MT_DYNAMIC_SHARED(float, tile);  // filled with 0xff bytes by the simulator
  __shared__ __align__(8) std::uint64_t barrier;
  const unsigned t = threadIdx.x;
  if (t == 0) ptx::mbarrier_init(&barrier, 1);
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(&barrier, tx_bytes);
    ptx::bulk_copy_global_to_shared(tile, src, copy_bytes, &barrier);
  }
  if (early != nullptr) early[t] = tile[t];  // not waited for yet
  ptx::mbarrier_wait(&barrier, 0);
  late[t] = tile[t];
}
void bulk_copy_read_before_wait(const float* src, float* early, float* late) {
  launch("bulk_copy_read_before_wait_kernel", bulk_copy_read_before_wait_kernel, dim3(1), dim3(64), 64 * sizeof(float),
         Stream{}, src, early, late, 64u * 4u, 64u * 4u);
}
void bulk_copy_missing_bytes(const float* src, float* out) {
  launch("bulk_copy_read_before_wait_kernel", bulk_copy_read_before_wait_kernel, dim3(1), dim3(64), 64 * sizeof(float),
         Stream{}, src, static_cast<float*>(nullptr), out, 64u * 4u, 32u * 4u);
}

__global__ void mbarrier_missing_arrival_kernel() {
  __shared__ __align__(8) std::uint64_t barrier;
  if (threadIdx.x == 0) ptx::mbarrier_init(&barrier, 2);
  __syncthreads();
  if (threadIdx.x == 0) ptx::mbarrier_arrive(&barrier);
  ptx::mbarrier_wait(&barrier, 0);
}
void mbarrier_missing_arrival() {
  launch("mbarrier_missing_arrival_kernel", mbarrier_missing_arrival_kernel, dim3(1), dim3(32), 0, Stream{});
}

// ---- TMA tensor maps and wgmma ------------------------------------------------------------------

__global__ void tensor_copy_raw_kernel(const __grid_constant__ kernels::TensorMap map, int c0, int c1,
                                       std::uint16_t* raw, unsigned elements) {
  MT_DYNAMIC_SHARED(std::uint16_t, tile);
  __shared__ __align__(8) std::uint64_t barrier;
  if (threadIdx.x == 0) ptx::mbarrier_init(&barrier, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(&barrier, elements * 2);
    ptx::tensor_copy_2d(tile, &map, c0, c1, &barrier);
  }
  ptx::mbarrier_wait(&barrier, 0);
  for (unsigned i = threadIdx.x; i < elements; i += blockDim.x) raw[i] = tile[i];
}
void tensor_copy_raw(const kernels::TensorMap& map, int c0, int c1, std::uint16_t* raw, unsigned elements) {
  launch("tensor_copy_raw_kernel", tensor_copy_raw_kernel, dim3(1), dim3(32), elements * 2, Stream{}, map, c0, c1, raw,
         elements);
}

__global__ void wgmma_interleaved_kernel(const std::uint16_t* a, const std::uint16_t* b, float* early, float* d,
                                         bool wait) {
  MT_DYNAMIC_SHARED(std::uint16_t, smem);
  std::uint16_t* sa = smem;
  std::uint16_t* sb = smem + 64 * 16;
  // No swizzle, K-major: 8 x 8 core matrices of 128 contiguous bytes; the two
  // k halves 128 bytes apart (LBO), the 8-row groups 256 bytes apart (SBO).
  for (unsigned i = threadIdx.x; i < 64 * 16; i += blockDim.x) {
    const unsigned row = i / 16, k = i % 16;
    const unsigned at = (row / 8) * 128 + (k / 8) * 64 + (row % 8) * 8 + (k % 8);
    sa[at] = a[i];
    sb[at] = b[i];
  }
  __syncthreads();
  ptx::fence_proxy_async_shared();
  float acc[32] = {};
  ptx::wgmma_fence();
  ptx::wgmma_m64k16<64, false, false, false>(acc, ptx::matrix_descriptor(sa, 128, 256, ptx::Swizzle::None),
                                             ptx::matrix_descriptor(sb, 128, 256, ptx::Swizzle::None), false);
  ptx::wgmma_commit_group();
  early[threadIdx.x] = acc[0];
  if (!wait) return;
  ptx::wgmma_wait_group<0>();
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned i = 0; i < 8; ++i) {
    for (unsigned r = 0; r < 4; ++r) {
      const unsigned row = 16 * warp + lane / 4 + (r >= 2 ? 8 : 0), col = 8 * i + 2 * (lane % 4) + (r & 1u);
      d[row * 64 + col] = acc[4 * i + r];
    }
  }
}
void wgmma_interleaved(const std::uint16_t* a, const std::uint16_t* b, float* early, float* d, bool wait) {
  launch("wgmma_interleaved_kernel", wgmma_interleaved_kernel, dim3(1), dim3(128), 2 * 64 * 16 * 2, Stream{}, a, b,
         early, d, wait);
}

// ---- thread block clusters ---------------------------------------------------------------------

__global__ void cluster_exchange_kernel(float* out, bool partner_arrives) {
  MT_DYNAMIC_SHARED(float, mine);
  auto* barrier = reinterpret_cast<std::uint64_t*>(mine + 32);
  const unsigned rank = ptx::cluster_ctarank(), other = rank ^ 1u, t = threadIdx.x;
  if (t == 0) ptx::mbarrier_init(barrier, 32);  // one arrival from each thread of the other block
  mine[t] = static_cast<float>(rank * 100 + t);
  ptx::cluster_sync();
  out[blockIdx.x * 32 + t] = ptx::map_shared_rank(mine, other)[t];  // the other block's shared memory
  if (partner_arrives || rank == 0) ptx::mbarrier_arrive_cluster(barrier, other);
  ptx::mbarrier_wait(barrier, 0);
  ptx::cluster_sync();  // nobody leaves while the other may still read its memory
}
void cluster_exchange(float* out, int clusters, bool partner_arrives) {
  launch_clusters("cluster_exchange_kernel", cluster_exchange_kernel, dim3(2 * clusters), dim3(32), dim3(2),
                  32 * sizeof(float) + 8, Stream{}, out, partner_arrives);
}

// ---- printf and launch errors -----------------------------------------------------------------

__global__ void hello_kernel() { printf("hello from thread %u of block %u\n", threadIdx.x, blockIdx.x); }
void print_hello(int threads) { launch("hello_kernel", hello_kernel, dim3(1), dim3(threads), 0, Stream{}); }

void bad_launch_too_many_threads() { launch("hello_kernel", hello_kernel, dim3(1), dim3(2048), 0, Stream{}); }
void bad_launch_too_much_shared() { launch("hello_kernel", hello_kernel, dim3(1), dim3(32), 300 * 1024, Stream{}); }

}  // namespace mt::sim::test
