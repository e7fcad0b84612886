// The indexing family's CPU back end (cpu.cpp), as the dispatcher
// (kernels/indexing/indexing.h) calls it.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/indexing/api.h"

namespace mt::kernels {

namespace cpu {
void index_select(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
}  // namespace cpu

}  // namespace mt::kernels
