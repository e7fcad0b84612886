#include "core/tensor.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/caching_allocator.h"
#include "core/device_fill_api.h"
#include "core/host_sync.h"
#include "core/stream.h"

namespace mt {

// ------------------------------------------------------------------ shapes

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t checked_numel(const Shape& shape, size_t element_bytes, const char* what) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    MT_CHECK(s >= 0, "{}: negative dimension in shape {}", what, shape_str(shape));
    overflow = overflow || __builtin_mul_overflow(n, s, &n);
  }
  int64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(n, static_cast<int64_t>(element_bytes), &bytes);
  MT_CHECK(!overflow, "{}: shape {} holds more elements than an int64 can count (or address in bytes)", what,
           shape_str(shape));
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_shape) {
  // No elements, or one: there is nothing to address, so any geometry works.
  if (shape_numel(sizes) <= 1) return contiguous_strides(new_shape);
  // Walk the old dims from the innermost, grouping them into chunks that are
  // contiguous within themselves (each dim's stride is the product of the
  // inner dims' sizes times the chunk's base stride; dims of size 1 join any
  // chunk). Each chunk must be made of whole new dims, which then take
  // strides counted from the chunk's base stride.
  Shape out(new_shape.size());
  int64_t new_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t chunk_numel = 1, new_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    chunk_numel *= sizes[d];
    const bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (new_d >= 0 && (new_numel < chunk_numel || new_shape[new_d] == 1)) {
      out[new_d] = new_numel * chunk_base_stride;
      new_numel *= new_shape[new_d];
      --new_d;
    }
    if (new_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[d - 1];
      chunk_numel = new_numel = 1;
    }
  }
  if (new_d != -1) return std::nullopt;
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  MT_CHECK(dim >= lo && dim <= hi, "{}: dim {} is out of range for a tensor with {} dims (expected {}..{})", op, dim,
           ndim, lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

// ------------------------------------------------------------------ devices and dtypes

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return fmt::format("cuda:{}", index);
    case DeviceType::SIM: return "sim";
  }
  return "?";
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return kCPU;
  if (text == "sim") return kSIM;
  if (text == "cuda") return kCUDA;
  if (text.rfind("cuda:", 0) == 0) {
    // A whole number that fits (std::stoi threw std::out_of_range past INT_MAX: found by fuzz_options).
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    int index = -1;
    const auto [end, error] = std::from_chars(first, last, index);
    MT_CHECK(first != last && error == std::errc() && end == last && index >= 0 && *first != '-',
             "invalid device '{}': the index after cuda: must be a whole number from 0 to {}", text,
             std::numeric_limits<int>::max());
    return Device(DeviceType::CUDA, index);
  }
  fail("invalid device '{}': expected cpu, cuda, cuda:N or sim", text);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // As PyTorch: FP8 data is scaled, so mixing it with another type has no
  // meaningful result type. Dequantize (or cast) it first.
  MT_CHECK(!is_fp8(a) && !is_fp8(b),
           "type promotion of {} with {} is not supported: FP8 tensors hold scaled data; dequantize them "
           "(mt::fp8::dequantize) or cast with .to() first",
           a, b);
  auto rank = [](DType t) {  // position in the promotion lattice
    switch (t) {
      case DType::Bool: return 0;
      case DType::U8:
      case DType::I8: return 1;
      case DType::I32: return 2;
      case DType::I64: return 3;
      case DType::F16:
      case DType::BF16: return 4;
      case DType::F32: return 5;
      case DType::F64: return 6;
      case DType::F8E4M3:
      case DType::F8E5M2: return 4;  // unreachable: refused above
    }
    return 0;
  };
  if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16)) return DType::F32;
  // Neither byte type holds the other (PyTorch meets at int16, which mixtape lacks).
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I32;
  return rank(a) >= rank(b) ? a : b;
}

// ------------------------------------------------------------------ storage

Storage::Storage(size_t nbytes, Device device) : Storage(nbytes, device, allocator_for(device)) {}

Storage::Storage(size_t nbytes, Device device, Allocator& allocator)
    : nbytes_(nbytes),
      device_(device),
      allocator_(&allocator),
      ledger_(&detail::ledger_for(device)),
      memory_category_(detail::scope_category()) {
  data_ = allocator.allocate(nbytes);
  detail::ledger_add(*ledger_, memory_category_, static_cast<int64_t>(nbytes_));
}

Storage::~Storage() {
  if (released_) return;
  allocator_->deallocate(data_, nbytes_);
  detail::ledger_remove(*ledger_, memory_category_, static_cast<int64_t>(nbytes_));
}

void Storage::throw_released() {
  fail("a tensor is read while its memory is released (a parameter that FullyShardedDataParallel sharded, used "
       "outside its unit's forward and backward?)");
}

void Storage::release_memory() {
  if (released_) return;
  allocator_->deallocate(data_, nbytes_);
  detail::ledger_remove(*ledger_, memory_category_, static_cast<int64_t>(nbytes_));
  data_ = nullptr;
  released_ = true;
}

void Storage::restore_memory() {
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_);
  detail::ledger_add(*ledger_, memory_category_, static_cast<int64_t>(nbytes_));
  released_ = false;
}

// ------------------------------------------------------------------ tensor basics

int64_t Tensor::size(int64_t dim) const {
  MT_CHECK(this->dim() > 0, "Tensor::size({}): a 0-dim tensor has no dims", dim);
  return sizes()[static_cast<size_t>(wrap_dim(dim, this->dim(), "Tensor::size"))];
}
int64_t Tensor::stride(int64_t dim) const {
  MT_CHECK(this->dim() > 0, "Tensor::stride({}): a 0-dim tensor has no dims", dim);
  return strides()[static_cast<size_t>(wrap_dim(dim, this->dim(), "Tensor::stride"))];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no elements: any layout will do
  const auto& s = sizes();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t d = s.size(); d-- > 0;) {
    if (s[d] == 1) continue;
    if (st[d] != expected) return false;
    expected *= s[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& impl = checked();
  if (!impl.storage || impl.storage->data() == nullptr) return nullptr;
  return static_cast<char*>(impl.storage->data()) + impl.offset * static_cast<int64_t>(element_size(impl.dtype));
}

Tensor& Tensor::requires_grad_(bool enabled) {
  auto& impl = checked();
  MT_CHECK(!enabled || is_floating(impl.dtype),
           "requires_grad_: only floating-point tensors can require gradients (got {})", impl.dtype);
  MT_CHECK(impl.grad_fn == nullptr || enabled,
           "requires_grad_(false) on a non-leaf tensor: use detach() to cut it from the graph");
  impl.requires_grad = enabled;
  return *this;
}

Tensor Tensor::detach() const {
  const auto& impl = checked();
  auto out = std::make_shared<TensorImpl>();
  out->storage = impl.storage;
  out->sizes = impl.sizes;
  out->strides = impl.strides;
  out->offset = impl.offset;
  out->dtype = impl.dtype;
  out->device = impl.device;
  return Tensor(std::move(out));
}

// ------------------------------------------------------------------ element access

double read_element(const Tensor& t, int64_t storage_offset) {
  const char* base = static_cast<const char*>(t.storage()->data());
  return visit_dtype(t.dtype(), [&](auto zero) -> double {
    using T = decltype(zero);
    T value;
    // Off the CPU this is one element over the bus: a host sync (counted), fine for tests and debugging.
    copy_bytes(&value, kCPU, base + storage_offset * static_cast<int64_t>(sizeof(T)), t.device(), sizeof(T),
               "item() (or another single-element read) of a device tensor");
    if constexpr (kIsNarrowFloat<T>) {
      return static_cast<double>(static_cast<float>(value));
    } else {
      return static_cast<double>(value);
    }
  });
}

template <typename T>
static T convert_from_double(double v) {
  if constexpr (kIsNarrowFloat<T>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

void write_element(const Tensor& t, int64_t storage_offset, double value) {
  char* base = static_cast<char*>(t.storage()->data());
  visit_dtype(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T v = convert_from_double<T>(value);
    copy_bytes(base + storage_offset * static_cast<int64_t>(sizeof(T)), t.device(), &v, kCPU, sizeof(T),
               "a single-element write to a device tensor");
  });
}

Tensor host_to_device(const Tensor& host, Device device) {
  if (device.host_accessible() && host.device().is_cpu() && device.is_cpu()) return host;
  MT_CHECK(host.device().host_accessible() && host.is_contiguous(),
           "host_to_device: expected a contiguous host tensor");
  Tensor out = empty(host.sizes(), host.dtype(), device);
  if (out.nbytes() > 0) {
    copy_bytes(out.data_ptr(), device, host.data_ptr(), host.device(), out.nbytes(), "a blocking upload to the device");
  }
  return out;
}

Tensor device_to_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(t.storage()->nbytes(), kCPU);
  if (t.storage()->nbytes() > 0) {
    copy_bytes(impl->storage->data(), kCPU, t.storage()->data(), t.device(), t.storage()->nbytes(),
               "to(kCPU) or to_vector() of a device tensor");
  }
  impl->sizes = t.sizes();
  impl->strides = t.strides();
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  impl->device = kCPU;
  return Tensor(std::move(impl));
}

double Tensor::item_as_double() const {
  MT_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape {}", shape_string());
  return read_element(*this, offset());  // off the CPU: a host sync
}

std::vector<double> Tensor::to_vector() const {
  if (!device().is_cpu()) return device_to_host(*this).to_vector();  // one blocking copy
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  for_each_offset(sizes(), strides(), offset(), [&](int64_t pos) { out.push_back(read_element(*this, pos)); });
  return out;
}

// ------------------------------------------------------------------ factories

Tensor empty(const Shape& shape, DType dtype, Device device) {
  const int64_t n = checked_numel(shape, element_size(dtype), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(n) * element_size(dtype), device);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.dtype(), t.device()); }

namespace {

// The value as the dtype's bit pattern, rounded as a cast rounds.
uint64_t element_bits(double value, DType dtype) {
  return visit_dtype(dtype, [&](auto zero) -> uint64_t {
    using T = decltype(zero);
    const T v = convert_from_double<T>(value);
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
  });
}

// A fill kernel on the device's current stream: no host buffer, no blocking copy.
void fill_on_device(const Tensor& t, double value) {
  const kernels::Stream stream{current_stream(t.device()).handle()};
  const auto bytes = static_cast<int>(element_size(t.dtype()));
  if (t.device().is_sim())
    return sim::fill_bits(t.data_ptr(), t.numel(), bytes, element_bits(value, t.dtype()), stream);
#if defined(MT_WITH_CUDA_KERNELS)
  cuda::fill_bits(t.data_ptr(), t.numel(), bytes, element_bits(value, t.dtype()), stream);
#else
  fail("full on {}: no CUDA device available: this build of mixtape has no CUDA kernels", t.device());
#endif
}

}  // namespace

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!device.is_cpu()) {
    fill_on_device(t, value);
    return t;
  }
  const int64_t n = t.numel();
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T v = convert_from_double<T>(value);
    T* p = static_cast<T*>(t.data_ptr());
    std::fill(p, p + n, v);
  });
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.sizes(), value, t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  MT_CHECK(step != 0.0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: expected finite start/end and a non-zero step, got ({}, {}, {})", start, end, step);
  MT_CHECK((end - start) / step >= 0, "arange: step {} does not move from {} towards {}", step, start, end);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (!device.host_accessible()) return host_to_device(arange(start, end, step, dtype, kCPU), device);
  Tensor t = empty({n}, dtype, device);
  for (int64_t i = 0; i < n; ++i) write_element(t, i, start + static_cast<double>(i) * step);
  return t;
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape_str(shape),
           shape_numel(shape));
  if (!device.host_accessible()) return host_to_device(from_vector(values, shape, dtype, kCPU), device);
  Tensor t = empty(shape, dtype, device);
  for (size_t i = 0; i < values.size(); ++i) write_element(t, static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, dtype, device);
}

Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype, Device device) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape_str(shape),
           shape_numel(shape));
  if (!device.host_accessible()) return host_to_device(from_vector(values, shape, dtype, kCPU), device);
  Tensor t = empty(shape, dtype, device);
  if (dtype == kI64) {
    std::copy(values.begin(), values.end(), t.data<int64_t>());
  } else {
    for (size_t i = 0; i < values.size(); ++i)
      write_element(t, static_cast<int64_t>(i), static_cast<double>(values[i]));
  }
  return t;
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  MT_CHECK(sizes.size() == strides.size(), "make_view: {} sizes but {} strides", sizes.size(), strides.size());
  // Bounds check: the furthest element reachable must lie inside the storage.
  int64_t lo = offset, hi = offset;
  bool empty_view = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    MT_CHECK(sizes[d] >= 0, "make_view: negative size in {}", shape_str(sizes));
    if (sizes[d] == 0) empty_view = true;
    const int64_t span = strides[d] * (sizes[d] - 1);
    (span < 0 ? lo : hi) += span;
  }
  const auto capacity = static_cast<int64_t>(base.storage()->nbytes() / element_size(base.dtype()));
  MT_CHECK(empty_view || (lo >= 0 && hi < capacity),
           "make_view: view sizes {} strides {} offset {} reaches outside a storage of {} elements", shape_str(sizes),
           shape_str(strides), offset, capacity);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

}  // namespace mt
