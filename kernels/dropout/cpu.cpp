#include "kernels/dropout/cpu.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

// Element i keeps when the i-th uniform of the stream (word i % 4 of Philox
// block offset + i / 4) is >= p, as on the GPU. Each block's four words serve
// four elements: drawing a block per element would cost four times the rounds.
template <typename T>
void forward_typed(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  Loaded<T> x(in);
  const int64_t n = in.numel();
  OutputBuffer<T> y(out);
  T* py = y.data();
  uint8_t* keep = static_cast<uint8_t*>(mask.data_ptr());
  const T scale = args.p < 1 ? static_cast<T>(1.0 / (1.0 - args.p)) : T(0);
  const auto p = static_cast<float>(args.p);
  // Eight blocks (32 elements) at a time through the vectorised generator;
  // each element still takes word i % 4 of block i / 4, wherever a thread's
  // range starts, so the mask does not depend on the thread count.
  const int64_t octets = (n + 31) / 32;
  parallel_for(octets, 64, [&](int64_t first_octet, int64_t end_octet) {
    for (int64_t octet = first_octet; octet < end_octet; ++octet) {
      uint32_t words[4][8];
      philox4x32_10_x8(args.seed, args.block_offset + static_cast<uint64_t>(octet * 8), words);
      const int64_t base = octet * 32, count = std::min<int64_t>(32, n - base);
      for (int64_t k = 0; k < count; ++k) {
        const int64_t i = base + k;
        const bool kept = uniform_from_bits(words[k % 4][k / 4]) >= p;
        keep[i] = kept ? 1 : 0;
        py[i] = kept ? x[i] * scale : T(0);
      }
    }
  });
  y.commit();
}

template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  Loaded<T> g(grad_out);
  const uint8_t* keep = static_cast<const uint8_t*>(mask.data_ptr());
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  OutputBuffer<T> dx(grad_in);
  T* pdx = dx.data();
  parallel_for(grad_out.numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) pdx[i] = keep[i] ? g[i] * scale : T(0);
  });
  dx.commit();
}

}  // namespace

void dropout_forward(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  MT_CHECK(mask.dtype() == kU8 && mask.is_contiguous() && mask.numel() == in.numel(),
           "dropout: mask must be a contiguous u8 tensor of {} elements", in.numel());
  if (in.dtype() == kF64) {
    forward_typed<double>(in, out, mask, args);
  } else {
    forward_typed<float>(in, out, mask, args);
  }
}

void dropout_backward(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  if (grad_in.dtype() == kF64) {
    backward_typed<double>(grad_out, mask, grad_in, p);
  } else {
    backward_typed<float>(grad_out, mask, grad_in, p);
  }
}

}  // namespace mt::kernels::cpu
