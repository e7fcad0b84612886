#include "kernels/softmax/cpu.h"

#include "kernels/softmax/math.h"
#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void forward_typed(const Tensor& in, const Tensor& out, bool log) {
  const int64_t cols = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t rows = cols == 0 ? 0 : in.numel() / cols;
  Loaded<T> x(in);
  OutputBuffer<T> y(out);  // out itself when it is contiguous T: no zeroed scratch, no copy after
  parallel_for(rows, 4 * cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) softmax_row(x.data() + r * cols, y.data() + r * cols, cols, log);
  });
  y.commit();
}

template <typename T>
void backward_typed(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  const int64_t cols = out.dim() == 0 ? 1 : out.size(-1);
  const int64_t rows = cols == 0 ? 0 : out.numel() / cols;
  Loaded<T> dy(grad_out), y(out);
  OutputBuffer<T> dx(grad_in);
  parallel_for(rows, 4 * cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      softmax_backward_row(dy.data() + r * cols, y.data() + r * cols, dx.data() + r * cols, cols, log);
    }
  });
  dx.commit();
}

}  // namespace

void softmax_forward(const Tensor& in, const Tensor& out, bool log) {
  if (in.dtype() == kF64) {
    forward_typed<double>(in, out, log);
  } else {
    forward_typed<float>(in, out, log);
  }
}

void softmax_backward(const Tensor& grad_out, const Tensor& out, const Tensor& grad_in, bool log) {
  if (grad_in.dtype() == kF64) {
    backward_typed<double>(grad_out, out, grad_in, log);
  } else {
    backward_typed<float>(grad_out, out, grad_in, log);
  }
}

}  // namespace mt::kernels::cpu
