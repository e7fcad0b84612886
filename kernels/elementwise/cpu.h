// The elementwise family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/elementwise/elementwise.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/elementwise/math.h"

namespace mt::kernels {

namespace cpu {
void unary(UnaryOp op, const Tensor& in, const Tensor& out, UnaryArgs args);
void unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& in, const Tensor& out, const Tensor& grad_in,
                    UnaryArgs args);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& out, double value);
}  // namespace cpu

}  // namespace mt::kernels
