// 2-D pooling over the last two dims of [planes, H, W] views (planes = N*C):
// max pooling (saving the argmax of each window), average pooling with
// optional padding, and adaptive average pooling.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

struct Pool2dWindow {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling only
};

namespace cpu {
// x [P, H, W] -> y [P, OH, OW]; indices (i64, [P, OH, OW]) holds h*W + w of
// each window's max (the first one on ties); padding never wins.
void max_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y, const Tensor& indices);
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx);
void avg_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y);
void avg_pool2d_backward(const Tensor& dy, const Pool2dWindow& window, const Tensor& dx);
// Output window i covers [floor(i*H/OH), ceil((i+1)*H/OH)) (as PyTorch).
void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y);
void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx);
}  // namespace cpu

inline void max_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y, const Tensor& indices) {
  if (backend_for(y.device(), "max_pool2d") != Backend::Cpu) {
    fail("max_pool2d: no CUDA kernel yet (tensor on {}); run it on the CPU", y.device());
  }
  cpu::max_pool2d_forward(x, window, y, indices);
}
inline void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  if (backend_for(dx.device(), "max_pool2d_backward") != Backend::Cpu) {
    fail(
        "max_pool2d_backward: no CUDA kernel yet (tensor on {}); run it on "
        "the CPU",
        dx.device());
  }
  cpu::max_pool2d_backward(dy, indices, dx);
}
inline void avg_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y) {
  if (backend_for(y.device(), "avg_pool2d") != Backend::Cpu) {
    fail("avg_pool2d: no CUDA kernel yet (tensor on {}); run it on the CPU", y.device());
  }
  cpu::avg_pool2d_forward(x, window, y);
}
inline void avg_pool2d_backward(const Tensor& dy, const Pool2dWindow& window, const Tensor& dx) {
  if (backend_for(dx.device(), "avg_pool2d_backward") != Backend::Cpu) {
    fail(
        "avg_pool2d_backward: no CUDA kernel yet (tensor on {}); run it on "
        "the CPU",
        dx.device());
  }
  cpu::avg_pool2d_backward(dy, window, dx);
}
inline void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  if (backend_for(y.device(), "adaptive_avg_pool2d") != Backend::Cpu) {
    fail(
        "adaptive_avg_pool2d: no CUDA kernel yet (tensor on {}); run it on "
        "the CPU",
        y.device());
  }
  cpu::adaptive_avg_pool2d_forward(x, y);
}
inline void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  if (backend_for(dx.device(), "adaptive_avg_pool2d_backward") != Backend::Cpu) {
    fail(
        "adaptive_avg_pool2d_backward: no CUDA kernel yet (tensor on {}); run "
        "it on the CPU",
        dx.device());
  }
  cpu::adaptive_avg_pool2d_backward(dy, dx);
}

}  // namespace mt::kernels
