#include "kernels/dropout.h"

#include "core/philox.h"
#include "kernels/cpu/strided.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void forward_typed(const Tensor& in, const Tensor& out, const Tensor& mask, DropoutArgs args) {
  Loaded<T> x(in);
  const int64_t n = in.numel();
  std::vector<T> y(static_cast<size_t>(n));
  uint8_t* keep = static_cast<uint8_t*>(mask.data_ptr());
  const T scale = args.p < 1 ? static_cast<T>(1.0 / (1.0 - args.p)) : T(0);
  const auto p = static_cast<float>(args.p);
  parallel_for(n, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const bool kept = philox_uniform(args.seed, args.block_offset, static_cast<uint64_t>(i)) >= p;
      keep[i] = kept ? 1 : 0;
      y[static_cast<size_t>(i)] = kept ? x[i] * scale : T(0);
    }
  });
  store(y.data(), out);
}

template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& mask, const Tensor& grad_in, double p) {
  Loaded<T> g(grad_out);
  const uint8_t* keep = static_cast<const uint8_t*>(mask.data_ptr());
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  std::vector<T> dx(static_cast<size_t>(grad_out.numel()));
  const int64_t n = grad_out.numel();
  for (int64_t i = 0; i < n; ++i) dx[static_cast<size_t>(i)] = keep[i] ? g[i] * scale : T(0);
  store(dx.data(), grad_in);
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
