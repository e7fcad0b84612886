// The CPU attention's tile products in BF16 dot products (AVX512-BF16's
// vdpbf16ps), for bf16 attention on CPUs that have them; the Eigen f32
// products of cpu.cpp serve every other case.
//
// A product is c (+)= alpha a b with a [m x k] and b [k x n] packed once
// into the layouts the instruction reads (both hold bf16 bits):
//   - Bf16Rows, the left operand: m rows of k values, zero-padded to an even
//     row length; each step broadcasts one row's next pair of values.
//   - Bf16Pairs, the right operand: for each pair of rows of b (2kk, 2kk+1),
//     every column's two values side by side, so 16 columns' pairs fill a
//     512-bit register; zero past k and past n.
// f32 sources (the probabilities P and score gradients dS) are rounded to
// bf16 once as they are packed (what the GPU's tensor-core attention and
// PyTorch's bf16 matmuls on the softmax output do); bf16 sources (q, k, v,
// grad_out) are copied as they are. The products accumulate in f32.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/half.h"

namespace mt::kernels::cpu::bf16_tiles {

// True when this CPU has AVX512-BF16 (with AVX512F/BW/VL) and MT_CPU_GEMM is
// not `eigen` (which keeps every CPU product in Eigen).
bool available();

struct Bf16Rows {
  const uint16_t* bits = nullptr;
  int64_t m = 0, k = 0, ld = 0;  // ld: even, >= k; values past k are zero
  // Rows [first, first + count).
  Bf16Rows rows(int64_t first, int64_t count) const { return {bits + first * ld, count, k, ld}; }
};

struct Bf16Pairs {
  const uint16_t* bits = nullptr;  // element (r, j) of b at bits[(r / 2 * ld + j) * 2 + r % 2]
  int64_t k = 0, n = 0, ld = 0;    // ld: columns per pair row, a multiple of 32 (reads run past n to it)
  // Rows [first, first + count) of b; `first` even.
  Bf16Pairs row_range(int64_t first, int64_t count) const { return {bits + first * ld, count, n, ld}; }
  // Columns [first, first + count) of b.
  Bf16Pairs columns(int64_t first, int64_t count) const { return {bits + first * 2, k, count, ld}; }
};

// Packing into `storage` (grown, reused). S is float or BFloat16; `stride`
// is the source's row stride in elements.
// a = src, m rows of k values.
template <typename S>
Bf16Rows pack_rows(const S* src, int64_t stride, int64_t m, int64_t k, std::vector<uint16_t>& storage);
// a = src^T, src being k rows of m values.
template <typename S>
Bf16Rows pack_rows_of_transpose(const S* src, int64_t stride, int64_t k, int64_t m, std::vector<uint16_t>& storage);
// b = src, k rows of n values.
template <typename S>
Bf16Pairs pack_pairs(const S* src, int64_t stride, int64_t k, int64_t n, std::vector<uint16_t>& storage);
// b = src^T, src being n rows of k bf16 values (the keys of q k^T).
Bf16Pairs pack_pairs_of_transpose(const BFloat16* src, int64_t stride, int64_t n, int64_t k,
                                  std::vector<uint16_t>& storage);

// c[m x n] (row stride ldc) = alpha a b, or c += alpha a b when accumulate.
// Requires available() and a.k == b.k.
void multiply(const Bf16Rows& a, const Bf16Pairs& b, float alpha, bool accumulate, float* c, int64_t ldc);

}  // namespace mt::kernels::cpu::bf16_tiles
