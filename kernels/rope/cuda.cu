// Rotary position embeddings (RoPE), forward and backward, in one kernel.
//
// What: y = x * cos + rotate_half(x) * sin over the last dim of x [..., T, D]
//   (HF Llama's pairing: element i with i + D/2), cos and sin [T, D]; the
//   backward is the rotation's transpose (kernels/rope/math.h). It replaces
//   four elementwise ops and a split/cat (x * cos, the negated half, the
//   concatenation, * sin, the sum): one read of x, one write of y.
// Algorithm: one thread per pair (rows * D/2 of them, grid-stride); a row's
//   position is its index modulo T, so the tables are read, not broadcast.
// Precision: the products and the sum in f32 (f64 for f64) from f32 tables,
//   the output rounded once to x's dtype.
// Bound: memory bandwidth (4 flops per element). Measured speed: not yet
//   measured on a GPU.
#include "kernels/common/element.h"
#include "kernels/rope/api.h"
#include "kernels/rope/math.h"
#include "runtime/launch.h"

namespace mt::MT_KERNEL_NS {
namespace {

template <typename E>
__global__ void rope_kernel(const typename E::Storage* x, const typename E::Acc* cos, const typename E::Acc* sin,
                            typename E::Storage* y, int64_t rows, int64_t positions, int64_t dim, bool backward) {
  using Acc = typename E::Acc;
  const int64_t half = dim / 2, pairs = rows * half;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = p / half, i = p % half;
    const int64_t at = row * dim + i, table = (row % positions) * dim + i;
    Acc y1, y2;
    kernels::rope_pair(E::to_acc(x[at]), E::to_acc(x[at + half]), cos[table], cos[table + half], sin[table],
                       sin[table + half], backward, &y1, &y2);
    y[at] = E::from_acc(y1);
    y[at + half] = E::from_acc(y2);
  }
}

constexpr int kThreads = 256;

}  // namespace

void rope(kernels::KernelDType dtype, const void* x, const void* cos, const void* sin, void* y, int64_t rows,
          int64_t positions, int64_t dim, bool backward, Stream stream) {
  const int64_t pairs = rows * (dim / 2);
  if (pairs <= 0) return;
  element::visit(dtype, [&](auto tag) {
    using E = decltype(tag);
    using Storage = typename E::Storage;
    using Acc = typename E::Acc;
    kernels::declare_launch_work(2.0 * rows * dim * sizeof(Storage));  // read x, write y (the tables stay in cache)
    const int64_t blocks = std::min<int64_t>((pairs + kThreads - 1) / kThreads, 4096);
    launch("rope_kernel", rope_kernel<E>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
           static_cast<const Storage*>(x), static_cast<const Acc*>(cos), static_cast<const Acc*>(sin),
           static_cast<Storage*>(y), rows, positions, dim, backward);
  });
}

}  // namespace mt::MT_KERNEL_NS
