#include "kernels/common/strided.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "core/threads.h"
#include "kernels/common/half_runs.h"

namespace mt::kernels::cpu {

int64_t omp_threads() { return omp_get_num_threads(); }
int64_t omp_thread_id() { return omp_get_thread_num(); }

int64_t threads_for(int64_t n, int64_t work_per_item) {
  if (n <= 1) return 1;
  const int64_t allowed = std::min<int64_t>(num_threads(), n);
  // Saturating: n * work can exceed int64 for absurd shapes.
  const int64_t per_thread = std::max<int64_t>(work_per_item, 1);
  const int64_t items_per_thread = std::max<int64_t>(1, (kMinWorkPerThread + per_thread - 1) / per_thread);
  return std::clamp<int64_t>(n / items_per_thread, 1, allowed);
}

namespace {

// Floating to a narrow integer type: truncate toward zero into int64, then wrap
// (-5.0 -> u8 251, as PyTorch; a direct float -> u8 conversion of a negative
// value is undefined, and the GPU's saturates to 0). The CUDA kernels' store_as
// follows the same rule.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (kIsNarrowFloat<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
    return static_cast<To>(static_cast<int64_t>(v));
  } else if constexpr (kIsNarrowFloat<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Calls fn(first_offset, count, stride, flat) for every innermost run of
// t's geometry (flat: the row-major index of the run's first element), the
// runs split across threads. `parallel` false walks them on this thread.
template <typename Fn>
void for_each_run(const Tensor& t, bool parallel, Fn&& fn) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t inner = t.dim() == 0 ? 1 : t.sizes().back();
  const int64_t rows = n / inner;
  auto walk = [&](int64_t begin, int64_t end) {
    int64_t flat = begin * inner;
    for_each_row_in(t.sizes(), t.strides(), t.offset(), begin, end, [&](int64_t first, int64_t count, int64_t stride) {
      fn(first, count, stride, flat);
      flat += count;
    });
  };
  if (parallel) {
    parallel_for(rows, inner, walk);
  } else {
    walk(0, rows);
  }
}

// True when two elements of t share a storage slot (a stride 0 along a
// dimension of size > 1, as expand makes): writes to it must stay in order.
bool has_aliased_elements(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) return true;
  }
  return false;
}

// dst[0, n) = src[0, n) converted. Between f32 and f16 or bf16 eight lanes
// at a time (kernels/common/half_runs.h: the same bits as convert).
template <typename To, typename From>
void convert_run(const From* __restrict src, To* __restrict dst, int64_t n) {
  constexpr bool kHalf = std::is_same_v<From, BFloat16> || std::is_same_v<From, Half>;
  constexpr bool kToHalf = std::is_same_v<To, BFloat16> || std::is_same_v<To, Half>;
  if constexpr (kHalf && std::is_same_v<To, float>) {
    widen_run(src, dst, n);
  } else if constexpr (std::is_same_v<From, float> && kToHalf) {
    narrow_run(src, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
  }
}

// Converts n elements read at (sizes, strides, offset) from storage type S into dst.
template <typename T, typename S>
void gather(const Tensor& t, T* dst) {
  const S* base = static_cast<const S*>(t.storage()->data());
  if (t.is_contiguous()) {
    const S* src = base + t.offset();
    parallel_for(t.numel(), 1, [&](int64_t begin, int64_t end) { convert_run(src + begin, dst + begin, end - begin); });
    return;
  }
  for_each_run(t, true, [&](int64_t first, int64_t count, int64_t stride, int64_t flat) {
    const S* src = base + first;
    T* out = dst + flat;
    if (stride == 1) {
      convert_run(src, out, count);
    } else {
      for (int64_t j = 0; j < count; ++j) out[j] = convert<T>(src[j * stride]);
    }
  });
}

template <typename T, typename S>
void scatter(const T* src, const Tensor& out) {
  S* base = static_cast<S*>(out.storage()->data());
  if (out.is_contiguous()) {
    S* dst = base + out.offset();
    parallel_for(out.numel(), 1,
                 [&](int64_t begin, int64_t end) { convert_run(src + begin, dst + begin, end - begin); });
    return;
  }
  // Threads may split the writes only when no two elements share a slot
  // (then which write lands last would depend on the thread count).
  for_each_run(out, !has_aliased_elements(out), [&](int64_t first, int64_t count, int64_t stride, int64_t flat) {
    S* dst = base + first;
    const T* in = src + flat;
    if (stride == 1) {
      convert_run(in, dst, count);
    } else {
      for (int64_t j = 0; j < count; ++j) dst[j * stride] = convert<S>(in[j]);
    }
  });
}

// dst = src converted element by element (dst contiguous): gather straight
// into dst's memory.
template <typename To, typename From>
void convert_contiguous(const Tensor& src, const Tensor& dst) {
  gather<To, From>(src, static_cast<To*>(dst.data_ptr()));
  dst.storage()->bump_version();
}

void check_host(const Tensor& t, const char* what) {
  MT_CHECK(t.device().host_accessible(), "CPU kernel {}: tensor is on {}, expected a host tensor", what, t.device());
}

}  // namespace

template <typename T>
Loaded<T>::Loaded(const Tensor& t) : size_(t.numel()) {
  check_host(t, "load");
  if (t.dtype() == dtype_of<T>() && t.is_contiguous()) {
    ptr_ = static_cast<const T*>(t.data_ptr());
    return;
  }
  owned_ = HostScratch<T>(size_);
  visit_dtype(t.dtype(), [&](auto zero) { gather<T, decltype(zero)>(t, owned_.get()); });
  ptr_ = owned_.get();
}

template <typename T>
void store(const T* values, const Tensor& out) {
  check_host(out, "store");
  if (out.dtype() == dtype_of<T>() && out.is_contiguous()) {
    T* dst = static_cast<T*>(out.data_ptr());
    // (An empty tensor may have no storage: memcpy's pointers must not be null, even for 0 bytes.)
    if (dst != values && out.numel() > 0) std::memcpy(dst, values, static_cast<size_t>(out.numel()) * sizeof(T));
  } else {
    visit_dtype(out.dtype(), [&](auto zero) { scatter<T, decltype(zero)>(values, out); });
  }
  out.storage()->bump_version();
}

template class Loaded<float>;
template class Loaded<double>;
template class Loaded<int64_t>;
template void store<float>(const float*, const Tensor&);
template void store<double>(const double*, const Tensor&);
template void store<int64_t>(const int64_t*, const Tensor&);

void copy(const Tensor& src, const Tensor& dst) {
  MT_CHECK(src.sizes() == dst.sizes(), "copy: source shape {} does not match destination shape {}", src.shape_string(),
           dst.shape_string());
  check_host(src, "copy");
  check_host(dst, "copy");
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (dst.nbytes() > 0) std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    dst.storage()->bump_version();
    return;
  }
  // Same-dtype strided copies move bits (no rounding, NaN payloads kept):
  // straight into a contiguous destination or out of a contiguous source
  // (a transpose made contiguous, attention's head layouts: through a
  // full-size buffer they were 5% of a llama-small bf16 step); through a
  // buffer only where both are strided or share storage (a copy within one
  // tensor must read every element before it writes any).
  if (src.dtype() == dst.dtype()) {
    const bool separate = src.storage() != dst.storage();
    visit_dtype(src.dtype(), [&](auto zero) {
      using S = decltype(zero);
      if (separate && dst.is_contiguous()) {
        gather<S, S>(src, static_cast<S*>(dst.data_ptr()));
      } else if (separate && src.is_contiguous()) {
        scatter<S, S>(static_cast<const S*>(src.data_ptr()), dst);
      } else {
        // std::unique_ptr<S[]>, not std::vector: vector<bool> has no data().
        auto tmp = std::make_unique<S[]>(static_cast<size_t>(src.numel()));
        gather<S, S>(src, tmp.get());
        scatter<S, S>(tmp.get(), dst);
      }
    });
    dst.storage()->bump_version();
    return;
  }
  // autocast's casts between f32 and bf16 or f16 (contiguous both): one
  // pass, without a full-size f32 buffer between the gather and the scatter
  // (the two were 2-3% of a llama-small bf16 step). The same conversions.
  if (src.is_contiguous() && dst.is_contiguous()) {
    if (src.dtype() == kF32 && dst.dtype() == kBF16) return convert_contiguous<BFloat16, float>(src, dst);
    if (src.dtype() == kBF16 && dst.dtype() == kF32) return convert_contiguous<float, BFloat16>(src, dst);
    if (src.dtype() == kF32 && dst.dtype() == kF16) return convert_contiguous<Half, float>(src, dst);
    if (src.dtype() == kF16 && dst.dtype() == kF32) return convert_contiguous<float, Half>(src, dst);
  }
  if (computes_in_double(src.dtype()) || computes_in_double(dst.dtype())) {
    Loaded<double> v(src);
    store(v.data(), dst);
  } else {
    Loaded<float> v(src);
    store(v.data(), dst);
  }
}

}  // namespace mt::kernels::cpu
