#include "kernels/indexing/cpu.h"

#include <cstring>

#include "kernels/common/strided.h"

namespace mt::kernels::cpu {
namespace {

// A tensor seen as [outer, size(dim), inner].
struct Split3 {
  int64_t outer = 1, mid = 1, inner = 1;
  Split3(const Shape& s, int64_t dim) {
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      if (d < dim) outer *= s[d];
      if (d == dim) mid = s[d];
      if (d > dim) inner *= s[d];
    }
  }
};

void check_index(const char* op, int64_t value, int64_t position, int64_t size) {
  MT_CHECK(value >= 0 && value < size, "{}: index {} at position {} is out of range for a dim of size {}", op, value,
           position, size);
}

// Calls fn(linear index i into `index`, coordinate of i in dim, outer part, inner part).
template <typename Fn>
void for_each_index_element(const Tensor& index, int64_t dim, Fn&& fn) {
  const Split3 geom(index.sizes(), dim);
  for (int64_t o = 0; o < geom.outer; ++o)
    for (int64_t m = 0; m < geom.mid; ++m)
      for (int64_t i = 0; i < geom.inner; ++i) fn((o * geom.mid + m) * geom.inner + i, m, o, i);
}

}  // namespace

void index_select(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  // Moves raw bytes: no rounding, any dtype. `out` is contiguous (fresh).
  Tensor src = in;
  if (!in.is_contiguous()) {
    src = empty(in.sizes(), in.dtype(), in.device());
    copy(in, src);
  }
  const Split3 geom(src.sizes(), dim);
  Loaded<int64_t> idx(index);
  const size_t row_bytes = static_cast<size_t>(geom.inner) * element_size(src.dtype());
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(out.data_ptr());
  const int64_t n = idx.size();
  for (int64_t i = 0; i < n; ++i) check_index("index_select", idx[i], i, geom.mid);
  for (int64_t o = 0; o < geom.outer; ++o) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(d + static_cast<size_t>(o * n + i) * row_bytes,
                  s + static_cast<size_t>(o * geom.mid + idx[i]) * row_bytes, row_bytes);
    }
  }
  out.storage()->bump_version();
}

template <typename T>
static void index_add_typed(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Split3 geom(out.sizes(), dim);
  Loaded<int64_t> idx(index);
  Loaded<T> vsrc(src);
  Loaded<T> current(out);
  std::vector<T> acc(current.data(), current.data() + current.size());
  const int64_t n = idx.size();
  for (int64_t i = 0; i < n; ++i) check_index("index_add", idx[i], i, geom.mid);
  for (int64_t o = 0; o < geom.outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < geom.inner; ++k)
        acc[static_cast<size_t>((o * geom.mid + idx[i]) * geom.inner + k)] += vsrc[(o * n + i) * geom.inner + k];
  store(acc.data(), out);
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (computes_in_double(out.dtype())) {
    index_add_typed<double>(out, dim, index, src);
  } else {
    index_add_typed<float>(out, dim, index, src);
  }
}

template <typename T>
static void gather_typed(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  Loaded<T> vin(in);
  Loaded<int64_t> idx(index);
  const Split3 src_geom(in.sizes(), dim);
  std::vector<T> result(static_cast<size_t>(index.numel()));
  // in is contiguous [outer, mid, inner]; index may be smaller in the other dims.
  const Shape in_strides = contiguous_strides(in.sizes());
  const Shape& isz = index.sizes();
  for (int64_t i = 0; i < index.numel(); ++i) {
    int64_t rem = i, pos = 0;
    for (int64_t d = static_cast<int64_t>(isz.size()) - 1; d >= 0; --d) {
      const int64_t coord = rem % isz[static_cast<size_t>(d)];
      rem /= isz[static_cast<size_t>(d)];
      if (d == dim) {
        check_index("gather", idx[i], i, src_geom.mid);
        pos += idx[i] * in_strides[static_cast<size_t>(d)];
      } else {
        pos += coord * in_strides[static_cast<size_t>(d)];
      }
    }
    result[static_cast<size_t>(i)] = vin[pos];
  }
  store(result.data(), out);
}

void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) {
  if (computes_in_double(in.dtype())) {
    gather_typed<double>(in, dim, index, out);
  } else {
    gather_typed<float>(in, dim, index, out);
  }
}

template <typename T>
static void scatter_add_typed(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  Loaded<T> current(out), vsrc(src);
  Loaded<int64_t> idx(index);
  std::vector<T> acc(current.data(), current.data() + current.size());
  const Shape out_strides = contiguous_strides(out.sizes());
  const Shape& isz = index.sizes();
  const int64_t dim_size = out.dim() == 0 ? 1 : out.size(dim);  // a 0-dim tensor acts as one element
  const Shape src_strides = contiguous_strides(src.sizes());
  for (int64_t i = 0; i < index.numel(); ++i) {
    int64_t rem = i, pos = 0, src_pos = 0;
    for (int64_t d = static_cast<int64_t>(isz.size()) - 1; d >= 0; --d) {
      const int64_t coord = rem % isz[static_cast<size_t>(d)];
      rem /= isz[static_cast<size_t>(d)];
      src_pos += coord * src_strides[static_cast<size_t>(d)];
      if (d == dim) {
        check_index("scatter_add", idx[i], i, dim_size);
        pos += idx[i] * out_strides[static_cast<size_t>(d)];
      } else {
        pos += coord * out_strides[static_cast<size_t>(d)];
      }
    }
    acc[static_cast<size_t>(pos)] += vsrc[src_pos];
  }
  store(acc.data(), out);
}

void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (computes_in_double(out.dtype())) {
    scatter_add_typed<double>(out, dim, index, src);
  } else {
    scatter_add_typed<float>(out, dim, index, src);
  }
}

}  // namespace mt::kernels::cpu
