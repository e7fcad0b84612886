#include "kernels/dropout/cpu.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/common/bf16x8.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

// Element i keeps when the i-th uniform of the stream (word i % 4 of Philox
// block offset + i / 4) is >= p, as on the GPU. Each block's four words serve
// four elements: drawing a block per element would cost four times the rounds.
// Calls body(base, count, kept) for the n elements 32 at a time (eight blocks
// through the vectorised generator; kept[k] is 1 or 0 for element base + k);
// each element still takes word i % 4 of block i / 4, wherever a thread's
// range starts, so the mask does not depend on the thread count.
template <typename Body>
void for_each_32(const DropoutArgs& args, int64_t n, Body&& body) {
  parallel_for((n + 31) / 32, 64, [&](int64_t first_octet, int64_t end_octet) {
    for (int64_t octet = first_octet; octet < end_octet; ++octet) {
      uint32_t words[4][8];
      philox4x32_10_x8(args.seed, args.block_offset + static_cast<uint64_t>(octet * 8), words);
      float kept[32];
      philox_keep_x32(words, static_cast<float>(args.p), kept);
      const int64_t base = octet * 32;
      body(base, std::min<int64_t>(32, n - base), kept);
    }
  });
}

// value where the keep flag (exactly 0 or 1) is set, else +0. As a bit mask
// the loops below vectorise; a float select stayed a branch per element.
// Unlike value * flag it drops an inf or NaN to 0, as the GPU kernel does.
inline float kept_or_zero(float value, uint32_t flag) { return bits_float(float_bits(value) & (0u - flag)); }
inline double kept_or_zero(double value, uint32_t flag) { return flag != 0 ? value : 0.0; }

template <typename T>
void forward_typed(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  Loaded<T> x(in);
  OutputBuffer<T> y(out);
  T* py = y.data();
  uint8_t* keep = static_cast<uint8_t*>(mask.data_ptr());
  const T scale = args.p < 1 ? static_cast<T>(1.0 / (1.0 - args.p)) : T(0);
  for_each_32(args, in.numel(), [&](int64_t base, int64_t count, const float* kept) {
    const T* xs = x.data() + base;  // local pointers: see forward_bf16
    T* ys = py + base;
    uint8_t* flags = keep + base;
    const T factor = scale;
    for (int64_t k = 0; k < count; ++k) ys[k] = kept_or_zero(xs[k] * factor, static_cast<uint32_t>(kept[k]));
    for (int64_t k = 0; k < count; ++k) flags[k] = static_cast<uint8_t>(kept[k]);
  });
  y.commit();
}

// Contiguous bf16 in and out (autocast's activations): read, scaled in f32
// and rounded once, element by element where they lie. Through the typed
// path a bf16 dropout gathered a whole f32 copy of its input and scattered
// an f32 result back (the hidden dropout was 6% of a bert-tiny bf16 step).
// The same f32 product, so the same bits.
bool bf16_in_place(const Tensor& in, const Tensor& out) {
  return in.dtype() == kBF16 && out.dtype() == kBF16 && in.is_contiguous() && out.is_contiguous();
}

void forward_bf16(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  const BFloat16* x = static_cast<const BFloat16*>(in.data_ptr());
  BFloat16* y = static_cast<BFloat16*>(out.data_ptr());
  uint8_t* keep = static_cast<uint8_t*>(mask.data_ptr());
  const float scale = args.p < 1 ? static_cast<float>(1.0 / (1.0 - args.p)) : 0.0f;
  for_each_32(args, in.numel(), [&](int64_t base, int64_t count, const float* kept) {
    // Local pointers: the flag bytes may alias anything, so stores through
    // them would otherwise make every captured pointer reload per element
    // and keep these loops scalar.
    const BFloat16* xs = x + base;
    BFloat16* ys = y + base;
    uint8_t* flags = keep + base;
    const float factor = scale;
    float scaled[32];
    for (int64_t k = 0; k < count; ++k) {
      scaled[k] = kept_or_zero(static_cast<float>(xs[k]) * factor, static_cast<uint32_t>(kept[k]));
    }
    narrow_bf16_run(scaled, ys, count);
    for (int64_t k = 0; k < count; ++k) flags[k] = static_cast<uint8_t>(kept[k]);
  });
  out.storage()->bump_version();
}

void backward_bf16(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  const BFloat16* g = static_cast<const BFloat16*>(grad_out.data_ptr());
  BFloat16* dx = static_cast<BFloat16*>(grad_in.data_ptr());
  const uint8_t* keep = static_cast<const uint8_t*>(mask.data_ptr());
  const float scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  parallel_for(grad_out.numel(), 1, [&](int64_t begin, int64_t end) {
    constexpr int64_t kBlock = 256;
    float scaled[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      for (int64_t k = 0; k < m; ++k) scaled[k] = kept_or_zero(static_cast<float>(g[b + k]) * scale, keep[b + k]);
      narrow_bf16_run(scaled, dx + b, m);
    }
  });
  grad_in.storage()->bump_version();
}

template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  Loaded<T> g(grad_out);
  const uint8_t* keep = static_cast<const uint8_t*>(mask.data_ptr());
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  OutputBuffer<T> dx(grad_in);
  T* pdx = dx.data();
  parallel_for(grad_out.numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) pdx[i] = kept_or_zero(g[i] * scale, keep[i]);
  });
  dx.commit();
}

}  // namespace

void dropout_forward(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  MT_CHECK(mask.dtype() == kU8 && mask.is_contiguous() && mask.numel() == in.numel(),
           "dropout: mask must be a contiguous u8 tensor of {} elements", in.numel());
  if (bf16_in_place(in, out)) {
    forward_bf16(in, out, mask, args);
  } else if (in.dtype() == kF64) {
    forward_typed<double>(in, out, mask, args);
  } else {
    forward_typed<float>(in, out, mask, args);
  }
}

void dropout_backward(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  if (bf16_in_place(grad_out, grad_in)) {
    backward_bf16(grad_out, mask, grad_in, p);
  } else if (grad_in.dtype() == kF64) {
    backward_typed<double>(grad_out, mask, grad_in, p);
  } else {
    backward_typed<float>(grad_out, mask, grad_in, p);
  }
}

}  // namespace mt::kernels::cpu
