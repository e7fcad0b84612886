#include "kernels/rope/cpu.h"

#include <vector>

#include "kernels/common/strided.h"
#include "kernels/rope/math.h"

namespace mt::kernels::cpu {
namespace {

template <typename T>
void rope_typed(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y, bool backward) {
  const int64_t dim = x.size(-1), positions = cos.size(0), half = dim / 2;
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  // bf16 and f16 rows are widened and narrowed one at a time (RowReader,
  // RowWriter), in cache, where a whole-tensor gather and scatter had
  // doubled the memory traffic of autocast's rotations.
  const RowReader<T> rx(x, dim);
  RowWriter<T> wy(y, dim);
  const Loaded<T> vc(cos), vs(sin);
  parallel_for(rows, 2 * dim, [&](int64_t begin, int64_t end) {
    std::vector<T> in_buffer(static_cast<size_t>(dim)), out_buffer(static_cast<size_t>(dim));
    for (int64_t r = begin; r < end; ++r) {
      const T* in = rx.row(r, in_buffer.data());
      T* out = wy.row(r, out_buffer.data());
      const T* c = vc.data() + (r % positions) * dim;
      const T* s = vs.data() + (r % positions) * dim;
      for (int64_t i = 0; i < half; ++i) {
        rope_pair(in[i], in[i + half], c[i], c[i + half], s[i], s[i + half], backward, out + i, out + i + half);
      }
      wy.finish_row(r, out);
    }
  });
  wy.commit();
}

}  // namespace

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y, bool backward) {
  if (x.dtype() == kF64) {
    rope_typed<double>(x, cos, sin, y, backward);
  } else {
    rope_typed<float>(x, cos, sin, y, backward);
  }
}

}  // namespace mt::kernels::cpu
