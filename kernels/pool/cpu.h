// The pool family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/pool/pool.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/pool/api.h"

namespace mt::kernels {

namespace cpu {
// x [P, H, W] -> y [P, OH, OW]; indices (i64, [P, OH, OW]) holds h*W + w of
// each window's max (the first one on ties); padding never wins. Undefined
// indices: y alone (what a no-grad forward asks for).
void max_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y, const Tensor& indices);
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2dWindow& window, const Tensor& dx);
void avg_pool2d_forward(const Tensor& x, const Pool2dWindow& window, const Tensor& y);
void avg_pool2d_backward(const Tensor& dy, const Pool2dWindow& window, const Tensor& dx);
// Output window i covers [floor(i*H/OH), ceil((i+1)*H/OH)) (as PyTorch).
void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y);
void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx);
}  // namespace cpu

}  // namespace mt::kernels
