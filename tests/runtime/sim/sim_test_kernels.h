// Host entry points of sim_test_kernels.cu: small kernels that exercise one
// simulator feature each (some deliberately broken). Simulator-only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/tensor_map.h"

namespace mt::sim::test {

// An mbarrier-guarded cp.async.bulk of 64 floats, by one block of 64 threads.
// early[t]: tile[t] read before waiting (stale: the copy has not landed);
// late[t]: after waiting. Shared memory starts as 0xff bytes (NaN).
void bulk_copy_read_before_wait(const float* src, float* early, float* late);
// Waits on a barrier expecting 256 bytes when only 128 are copied: a deadlock.
void bulk_copy_missing_bytes(const float* src, float* out);
// Two arrivals expected, one made: a deadlock naming the mbarrier wait.
void mbarrier_missing_arrival();

// Clusters of 2 blocks of 32 threads: each thread writes rank * 100 + t to
// its block's shared memory, reads the other block's (out[block * 32 + t]),
// and arrives on the other block's mbarrier (expecting 32); with
// `partner_arrives` false rank 1 never arrives, so rank 0 waits forever.
void cluster_exchange(float* out, int clusters, bool partner_arrives);

// TMA: copies the box of `map` at (c0, c1) into shared memory and writes the
// shared bytes back unchanged (still swizzled) to `raw` (`elements` f16).
void tensor_copy_raw(const mt::kernels::TensorMap& map, int c0, int c1, std::uint16_t* raw, unsigned elements);
// wgmma m64n64k16 f16, operands in the no-swizzle K-major layout: d = A (64 x 16,
// row-major) * B^T (B 64 x 16, row-major), row-major 64 x 64. `early` gets each
// thread's first accumulator right after the commit; without `wait` the
// kernel ends before wgmma.wait_group.
void wgmma_interleaved(const std::uint16_t* a, const std::uint16_t* b, float* early, float* d, bool wait);

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

// out[linear thread of the grid] = {threadIdx, blockIdx, blockDim, gridDim} packed,
// after a shared-memory neighbour exchange across a barrier.
void thread_indices(Dim grid, Dim block, unsigned* out);
void barrier_neighbour(int threads, int* out);  // out[t] = t+1 via shared memory

enum class Shuffle { Index, Up, Down, Xor };
// Lanes in `mask` shuffle value 100+lane; others write -1.
void shuffle(Shuffle kind, unsigned mask, int lane_arg, int width, int* out);
// out[lane] = {ballot, any, all} of predicate ((lane % modulus) == 0) over mask.
void votes(unsigned mask, int modulus, unsigned* out);
// out[lane] = __activemask() inside `if (lane < active_lanes)`.
void active_mask_in_branch(int active_lanes, unsigned* out);

struct AtomicResults {
  int int_sum;
  float float_sum;
  unsigned max_value;
  int min_value;
  unsigned long long cas_counter;
  int exch_last;
  unsigned or_bits;
};
void atomics(int blocks, int threads, AtomicResults* out);

// Each block sums its index into static and dynamic shared memory; out[block]
// checks the block saw only its own data.
void shared_memory(int blocks, int threads, std::size_t dynamic_bytes, int* out);

// Broken kernels: each must throw mt::Error naming the kernel and block.
void early_return_before_barrier();
void divergent_barriers();
void shuffle_with_exited_lane();
void mask_without_own_lane();

// Race-check kernels: a missing __syncthreads, the fixed version, and a
// warp-synchronous exchange ordered by __syncwarp.
void racy_neighbour(float* out);
void fixed_neighbour(float* out);
void warp_exchange_with_syncwarp(float* out);
void racy_dynamic(float* out);

// Tensor Core wrappers. Matrices are row-major; A 16x16, B 16x8 (K x N), C/D 16x8.
// Fragments are built by each lane straight from the PTX-documented layout.
void mma_f16(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d);
void mma_bf16(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d);
// ldmatrix of `matrices` 8x8 b16 matrices stored consecutively (row r of matrix m
// at src + (m*8 + r)*8): out[lane*4 + reg].
void ldmatrix(int matrices, bool trans, const std::uint16_t* src, std::uint32_t* out);

// cp.async: out[0..3] read before wait_group (stale), out[4..7] after, for a
// 16-byte copy of src, then a zero-filled copy (src_bytes = 4) in out[8..11].
void cp_async_staging(const float* src, float* out);

void print_hello(int threads);
void bad_launch_too_many_threads();
void bad_launch_too_much_shared();

}  // namespace mt::sim::test
