// Index kernels (i64 indices, range-checked): index_select / index_add along
// one dim (embedding is index_select on dim 0) and gather / scatter_add.
// index_add and scatter_add accumulate in a fixed order: deterministic.
#pragma once

#include "kernels/dispatch.h"

namespace mt::kernels {

namespace cpu {
void index_select(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
}  // namespace cpu

inline void index_select(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  backend_for(out.device(), "index_select");
  cpu::index_select(in, dim, index, out);
}
// out.select(dim, index[i]) += src.select(dim, i)
inline void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  backend_for(out.device(), "index_add");
  cpu::index_add(out, dim, index, src);
}
inline void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  backend_for(out.device(), "gather");
  cpu::gather(in, dim, index, out);
}
inline void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  backend_for(out.device(), "scatter_add");
  cpu::scatter_add(out, dim, index, src);
}

}  // namespace mt::kernels
