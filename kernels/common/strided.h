// Moving tensor data between its stored dtype/layout and a contiguous compute
// buffer. This is how the CPU backend honours "low-precision inputs compute
// with f32 accumulation and round once on store": f16/bf16 (and f32) values
// are loaded as float, f64 and integers as double, every op computes on the
// buffer, and store() rounds each result once into the output's dtype.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/host_scratch.h"
#include "core/tensor.h"
#include "kernels/common/half_runs.h"
#include "kernels/common/tensor_ref.h"

namespace mt::kernels::cpu {

// The values of a (possibly strided, broadcast) tensor as a contiguous
// row-major array of T. Borrows the tensor's memory when it already is one.
template <typename T>
class Loaded {
 public:
  explicit Loaded(const Tensor& t);
  const T* data() const { return ptr_; }
  int64_t size() const { return size_; }
  const T& operator[](int64_t i) const { return ptr_[i]; }

 private:
  HostScratch<T> owned_;  // uninitialised until gathered into
  const T* ptr_ = nullptr;
  int64_t size_ = 0;
};

// True when every element of t is one storage slot: a scalar broadcast to a
// shape (a 0-dim operand, a mask's fill value), or a single element.
inline bool is_broadcast_scalar(const Tensor& t) {
  if (t.numel() == 0) return false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) != 0) return false;
  }
  return true;
}

// An elementwise kernel's input as it reads it: per element from a Loaded
// buffer, or, for a broadcast scalar, one value read once (so a scalar
// operand is never copied out to the output's size). visit_operand calls
// fn with an accessor of one kind or the other: `v[i]` for element i.
template <typename T>
struct Elements {
  const T* p;
  T operator[](int64_t i) const { return p[i]; }
};
template <typename T>
struct Repeated {
  T value;
  T operator[](int64_t) const { return value; }
};

template <typename T, typename Fn>
void visit_operand(const Tensor& t, Fn&& fn) {
  if (is_broadcast_scalar(t)) {
    const Loaded<T> one(make_view(t, {}, {}, t.offset()));
    fn(Repeated<T>{one[0]});
  } else {
    const Loaded<T> all(t);
    fn(Elements<T>{all.data()});
  }
}

// Writes n = out.numel() contiguous values into `out` (any dtype, any strides),
// rounding each once to out's dtype.
template <typename T>
void store(const T* values, const Tensor& out);

// dst[...] = src[...] with dtype conversion; shapes must match (src may be broadcast).
void copy(const Tensor& src, const Tensor& dst);

// Read-modify-write access to a tensor as contiguous T values: its own memory
// when it already is contiguous T, else a scratch copy written back (rounded
// once) by commit().
template <typename T>
class Updatable {
 public:
  explicit Updatable(const Tensor& t) : tensor_(t) {
    if (t.dtype() == dtype_of<T>() && t.is_contiguous()) {
      ptr_ = static_cast<T*>(t.data_ptr());
      return;
    }
    Loaded<T> values(t);
    scratch_.assign(values.data(), values.data() + values.size());
    ptr_ = scratch_.data();
  }
  T* data() { return ptr_; }
  void commit() {
    if (scratch_.empty()) {
      tensor_.storage()->bump_version();
    } else {
      store(ptr_, tensor_);
    }
  }

 private:
  const Tensor& tensor_;
  T* ptr_ = nullptr;
  std::vector<T> scratch_;
};

// Pointer to contiguous T data of `out` when it already is that, else nullptr.
template <typename T>
T* direct_output(const Tensor& out) {
  return (out.dtype() == dtype_of<T>() && out.is_contiguous()) ? static_cast<T*>(out.data_ptr()) : nullptr;
}

// A write-only contiguous T buffer for `out`: its own memory when it already
// is contiguous T, else scratch stored (rounded once) into it by commit().
template <typename T>
class OutputBuffer {
 public:
  explicit OutputBuffer(const Tensor& out) : out_(out), ptr_(direct_output<T>(out)) {
    if (ptr_ == nullptr) {
      scratch_ = HostScratch<T>(out.numel());
      ptr_ = scratch_.get();
    }
  }
  T* data() { return ptr_; }
  void commit() {
    if (scratch_.empty()) {
      out_.storage()->bump_version();
    } else {
      store(ptr_, out_);
    }
  }

 private:
  Tensor out_;
  T* ptr_;
  HostScratch<T> scratch_;  // uninitialised: the kernel writes every element
};

// Calls fn(in, out) with the inputs' and the output's elements as pointers
// of one stored type S: in place when every tensor is contiguous in one
// dtype (S = float, BFloat16 or Half with T = float, for kernels that read
// eight lanes at a time with half_runs.h's load_f32x8 and compute in f32;
// S = double with T = double), else the inputs gathered into T and the
// output written through a T buffer (S = T). `out` may be undefined (out =
// null). Batch norm's 16-bit rows used to be widened into an f32 row buffer
// and narrowed out of another (RowReader, RowWriter): a single-threaded
// bf16 batch norm of [128, 128, 7, 7] took longer than the f32 one (1.35
// against 0.95 ms with its backward), on half the bytes.
template <typename T, size_t N, typename Fn>
void with_rows(const std::array<const Tensor*, N>& in, const Tensor& out, Fn&& fn) {
  const DType dtype = in[0]->dtype();
  bool in_place = true;
  for (const Tensor* t : in) in_place = in_place && t->dtype() == dtype && t->is_contiguous();
  if (out.defined()) in_place = in_place && out.dtype() == dtype && out.is_contiguous();
  auto run_in_place = [&](auto zero) {
    using S = decltype(zero);
    std::array<const S*, N> rows;
    for (size_t i = 0; i < N; ++i) rows[i] = static_cast<const S*>(in[i]->data_ptr());
    fn(rows, out.defined() ? static_cast<S*>(out.data_ptr()) : nullptr);
    if (out.defined()) out.storage()->bump_version();
  };
  if constexpr (std::is_same_v<T, double>) {
    if (in_place && dtype == kF64) return run_in_place(double{});
  } else {
    if (in_place && dtype == kF32) return run_in_place(float{});
    if (in_place && dtype == kBF16) return run_in_place(BFloat16{});
    if (in_place && dtype == kF16) return run_in_place(Half{});
  }
  std::array<std::optional<Loaded<T>>, N> loaded;
  std::array<const T*, N> rows;
  for (size_t i = 0; i < N; ++i) rows[i] = loaded[i].emplace(*in[i]).data();
  if (!out.defined()) return fn(rows, static_cast<T*>(nullptr));
  OutputBuffer<T> buffer(out);
  fn(rows, buffer.data());
  buffer.commit();
}

// A tensor read row by row (rows of `cols` values, row r at r * cols) in
// compute type T without a full-size copy: contiguous T is read in place,
// contiguous bf16 or f16 (autocast's activations) is widened a row at a time
// into the caller's buffer, where it stays in cache; anything else is
// gathered once up front. Pooling and RoPE read through it; batch norm and
// the conv bias gradient read 16-bit rows in place through with_rows (above),
// eight lanes at a time.
template <typename T>
class RowReader {
 public:
  RowReader(const Tensor& t, int64_t cols) : cols_(cols) {
    if (t.is_contiguous() && (t.dtype() == kBF16 || t.dtype() == kF16) && std::is_same_v<T, float>) {
      half_ = t.data_ptr();
      f16_ = t.dtype() == kF16;
    } else {
      loaded_.emplace(t);
    }
  }
  // Row r: a pointer into the tensor (or its gathered copy), or `buffer`
  // (cols values) filled with it.
  const T* row(int64_t r, T* buffer) const {
    if (loaded_) return loaded_->data() + r * cols_;
    if constexpr (std::is_same_v<T, float>) {
      if (f16_) {
        widen_run(static_cast<const Half*>(half_) + r * cols_, buffer, cols_);
      } else {
        widen_run(static_cast<const BFloat16*>(half_) + r * cols_, buffer, cols_);
      }
    }
    return buffer;
  }

 private:
  std::optional<Loaded<T>> loaded_;
  const void* half_ = nullptr;
  bool f16_ = false;
  int64_t cols_;
};

// The writing side: row r is written where row() says (out's memory, or the
// caller's buffer for contiguous bf16 or f16, rounded into out by
// finish_row), and commit() ends the op (stores a general layout, bumps the
// version).
template <typename T>
class RowWriter {
 public:
  RowWriter(const Tensor& out, int64_t cols) : out_(out), cols_(cols) {
    if (out.is_contiguous() && (out.dtype() == kBF16 || out.dtype() == kF16) && std::is_same_v<T, float>) {
      half_ = out.data_ptr();
      f16_ = out.dtype() == kF16;
    } else {
      buffer_.emplace(out);
    }
  }
  T* row(int64_t r, T* buffer) { return buffer_ ? buffer_->data() + r * cols_ : buffer; }
  void finish_row(int64_t r, const T* written) {
    if (buffer_) return;
    if constexpr (std::is_same_v<T, float>) {
      if (f16_) {
        narrow_run(written, static_cast<Half*>(half_) + r * cols_, cols_);
      } else {
        narrow_run(written, static_cast<BFloat16*>(half_) + r * cols_, cols_);
      }
    }
  }
  void commit() {
    if (buffer_) {
      buffer_->commit();
    } else {
      out_.storage()->bump_version();
    }
  }

 private:
  Tensor out_;
  std::optional<OutputBuffer<T>> buffer_;
  void* half_ = nullptr;
  bool f16_ = false;
  int64_t cols_;
};

// Wrappers so this header need not include omp.h.
int64_t omp_threads();
int64_t omp_thread_id();

// Below this much work (roughly: element operations) a thread costs more to
// wake and wait for than it saves; PyTorch's at::parallel_for uses the same
// grain. On a busy machine every parallel region can wait a time slice for a
// descheduled thread, so small ops must not open one at all.
inline constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;

// Threads worth using for n items of `work_per_item` each: at most
// mt::num_threads(), and none beyond one per kMinWorkPerThread of work.
int64_t threads_for(int64_t n, int64_t work_per_item);

// Runs body(begin, end) over [0, n), split into contiguous ranges across
// threads_for(n, work_per_item) threads. Each item must be computed the same
// way whatever range it falls in, so results never depend on the thread
// count (ThreadTuner changes it during training).
template <typename Body>
void parallel_for(int64_t n, int64_t work_per_item, Body&& body) {
  const int64_t threads = threads_for(n, work_per_item);
  if (threads <= 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    const int64_t team = omp_threads();
    const int64_t id = omp_thread_id();
    const int64_t chunk = (n + team - 1) / team;
    const int64_t begin = std::min(n, id * chunk);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace mt::kernels::cpu
