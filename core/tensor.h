// mt::Tensor — a cheap, reference-counted handle to a strided view of a Storage.
//
// A tensor is (storage, sizes, strides, offset, dtype, device) plus autograd
// metadata. Views share storage. Element offsets and strides are in elements.
//
// Layering: core/ knows the data; the *differentiable* methods declared at the
// bottom of this class (reshape, permute, to(dtype), backward, ...) record on
// the tape, so core/tensor_methods.cpp defines them as calls into the
// autograd layer's implementations (autograd/ops_shape.cpp), which that layer
// installs at start-up. Free-function ops (mt::matmul, mt::softmax,
// operators) live in autograd/ops.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "runtime/error.h"
#include "core/memory_ledger.h"

namespace mt {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// shape_numel for shapes from outside (factories, files): an mt::Error naming
// `what` when a dim is negative or numel * element_bytes does not fit in int64.
int64_t checked_numel(const Shape& shape, size_t element_bytes, const char* what);
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); names `op` in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The strides that view `sizes`/`strides` as `new_shape` without copying, or
// nothing when no strides can (PyTorch's rule: each run of dims that is
// contiguous within itself may be split or merged; dims are never
// reordered). `new_shape` must have the same number of elements.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_shape);

// The integral types a `dim` argument may be (braces stay a Shape of dims:
// x.sum({}) is every dim, x.sum(-1) the last one).
template <typename I>
using IfDim = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int>;

namespace autograd {
class Node;
}
struct ValuesIndices;

// A block of memory owned through an Allocator. `version` counts in-place
// writes so autograd can tell a saved tensor was modified after being saved.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory from a specific allocator (e.g. pinned host memory for a CPU tensor).
  Storage(size_t nbytes, Device device, Allocator& allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    if (released_) throw_released();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  const Allocator& allocator() const { return *allocator_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // PyTorch FSDP's storage.resize_(0) and back: the memory returns to the
  // allocator and later comes anew (contents undefined), while every tensor
  // sharing this Storage (views, tensors saved for backward) keeps referring
  // to it and sees what is written after restore_memory(). Reading a
  // released storage is an mt::Error, not a crash. set_version puts back the
  // version after a rewrite that restored the values it had (FSDP's regather
  // in backward), so tensors saved for backward stay valid.
  void release_memory();
  void restore_memory();
  bool released() const { return released_; }
  void set_version(uint64_t version) { version_ = version; }
  // Its memory ledger entry (core/memory_ledger.h); tag_memory() re-files it.
  MemoryCategory memory_category() const { return memory_category_; }
  detail::DeviceLedger& ledger() const { return *ledger_; }

 private:
  friend class detail::DeviceLedger;
  [[noreturn]] static void throw_released();
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_;
  uint64_t version_ = 0;
  bool released_ = false;
  detail::DeviceLedger* ledger_;
  MemoryCategory memory_category_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::F32;
  Device device;

  // Autograd metadata. A tensor with requires_grad and no grad_fn is a leaf.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  // Set on a loss that GradScaler::scale() produced, and on each .grad a
  // backward from such a loss wrote: they hold scale x dL/dp until unscale_
  // divides them, and clip_grad_norm_ refuses them until then (clipping
  // scaled gradients is the most common AMP mistake).
  bool loss_scaled = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- shape and layout
  const Shape& sizes() const { return checked().sizes; }
  const Shape& strides() const { return checked().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const { return shape_numel(sizes()); }
  int64_t offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().device; }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }

  // ---- raw data (host-accessible devices only for typed access)
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    MT_CHECK(dtype_of<T>() == dtype(), "Tensor::data<{}>(): tensor has dtype {}", dtype_of<T>(), dtype());
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }

  // The single value of a one-element tensor, converted to T.
  template <typename T>
  T item() const {
    return static_cast<T>(item_as_double());
  }
  double item_as_double() const;
  // All elements, in row-major order, converted to double (host-accessible devices).
  std::vector<double> to_vector() const;

  std::string str() const;  // PyTorch-like print: tensor([...], dtype=f16)
  std::string shape_string() const { return shape_str(sizes()); }

  // ---- autograd metadata
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& requires_grad_(bool enabled = true);
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(checked().grad); }
  void set_grad(const Tensor& g) const { checked().grad = g.impl_; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  // Shares storage, drops autograd history.
  Tensor detach() const;

  // ---- differentiable methods: they record on the tape and run kernels, so
  // core forwards them to the autograd layer through core/tensor_methods.h
  // (implementations in autograd/ops_shape.cpp).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor clone() const;

  // ---- op forms: PyTorch's method spellings of the ops in autograd/ops.h
  // (x.pow(2).mean(-1, true) is mt::mean(mt::pow(x, 2), {-1}, true)); they
  // reach the autograd layer through the same table.
  Tensor add(const Tensor& other) const;
  Tensor add(double other) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(double other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(double exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor matmul(const Tensor& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor square() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor cumsum(int64_t dim) const;

  // Reductions: every element, one integer dim, or a braced list of dims.
  Tensor sum() const { return sum(Shape{}); }
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  template <typename I, IfDim<I> = 0>
  Tensor sum(I dim, bool keepdim = false) const {
    return sum(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  Tensor mean() const { return mean(Shape{}); }
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  template <typename I, IfDim<I> = 0>
  Tensor mean(I dim, bool keepdim = false) const {
    return mean(Shape{static_cast<int64_t>(dim)}, keepdim);
  }
  // correction 1 is the unbiased variance (PyTorch's default), 0 the population one.
  Tensor var() const { return var(Shape{}); }
  Tensor var(const Shape& dims, double correction = 1, bool keepdim = false) const;
  template <typename I, IfDim<I> = 0>
  Tensor var(I dim, double correction = 1, bool keepdim = false) const {
    return var(Shape{static_cast<int64_t>(dim)}, correction, keepdim);
  }
  Tensor max() const;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true) const;
  ValuesIndices sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;

 private:
  TensorImpl& checked() const {
    MT_CHECK(impl_ != nullptr, "operation on an undefined tensor (default-constructed mt::Tensor)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// What max(dim), min(dim), topk and sort return (PyTorch's named tuple).
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};

// ---- construction (core: no autograd history; requires_grad_ can be set after)
Tensor empty(const Shape& shape, DType dtype = kF32, Device device = kCPU);
Tensor empty_like(const Tensor& t);
Tensor zeros(const Shape& shape, DType dtype = kF32, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = kF32, Device device = kCPU);
Tensor full(const Shape& shape, double value, DType dtype = kF32, Device device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step = 1.0, DType dtype = kF32, Device device = kCPU);
Tensor scalar_tensor(double value, DType dtype = kF32, Device device = kCPU);
// Values are given in row-major order and rounded to `dtype`.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = kF32, Device device = kCPU);
Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = kF32, Device device = kCPU);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype = kI64, Device device = kCPU);

// Raw moves between the host and a device that the host cannot read (CUDA):
// a contiguous host tensor's bytes onto `device`, and a tensor's whole
// storage back to a host tensor with the same geometry. No autograd.
Tensor host_to_device(const Tensor& host, Device device);
Tensor device_to_host(const Tensor& t);

// A view of `base`'s storage with the given geometry (no autograd; bounds-checked).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);

// Reads/writes one element at a storage offset (in elements), host-accessible only.
double read_element(const Tensor& t, int64_t storage_offset);
void write_element(const Tensor& t, int64_t storage_offset, double value);

// Calls fn(first_offset, count, stride) for runs [row_begin, row_end) along
// the innermost dimension (a run is one innermost row; there are
// numel / sizes.back() of them), in row-major order: the run's elements sit
// at first_offset + j * stride for j < count. Kernels loop over a run
// themselves, so a contiguous innermost dimension (stride 1) is a plain loop
// the compiler vectorises. A range lets threads split one walk.
template <typename Fn>
void for_each_row_in(const Shape& sizes, const Shape& strides, int64_t offset, int64_t row_begin, int64_t row_end,
                     Fn&& fn) {
  if (shape_numel(sizes) == 0 || row_begin >= row_end) return;
  const size_t nd = sizes.size();
  if (nd == 0) {
    fn(offset, int64_t{1}, int64_t{1});
    return;
  }
  const int64_t inner = sizes[nd - 1], inner_stride = strides[nd - 1];
  std::vector<int64_t> index(nd - 1, 0);
  int64_t pos = offset;
  int64_t rest = row_begin;  // unravel row_begin into the outer dims' index
  for (size_t d = nd - 1; d-- > 0;) {
    index[d] = rest % sizes[d];
    rest /= sizes[d];
    pos += index[d] * strides[d];
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    fn(pos, inner, inner_stride);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++index[d] < sizes[d]) {
        pos += strides[d];
        break;
      }
      pos -= strides[d] * (sizes[d] - 1);
      index[d] = 0;
    }
  }
}

// Every run of the tensor: for_each_row_in over all of its rows.
template <typename Fn>
void for_each_row(const Shape& sizes, const Shape& strides, int64_t offset, Fn&& fn) {
  const int64_t n = shape_numel(sizes);
  if (n == 0) return;
  const int64_t rows = sizes.empty() ? 1 : n / sizes.back();
  for_each_row_in(sizes, strides, offset, 0, rows, std::forward<Fn>(fn));
}

// Calls fn(storage_offset) for every element of t in row-major order.
template <typename Fn>
void for_each_offset(const Shape& sizes, const Shape& strides, int64_t offset, Fn&& fn) {
  for_each_row(sizes, strides, offset, [&](int64_t first, int64_t count, int64_t stride) {
    for (int64_t j = 0; j < count; ++j) fn(first + j * stride);
  });
}

}  // namespace mt

template <>
struct fmt::formatter<mt::Tensor> : fmt::formatter<std::string> {
  auto format(const mt::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
