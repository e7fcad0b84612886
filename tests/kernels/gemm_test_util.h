// Host-side helpers for the simulator kernel tests: typed buffers of any
// KernelDType filled from doubles, read back as doubles.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/half.h"
#include "kernels/common/kernel_dtype.h"

namespace mt::test {

using kernels::KernelDType;

inline std::size_t kernel_dtype_size(KernelDType t) {
  return t == KernelDType::F64 ? 8 : t == KernelDType::F32 ? 4 : 2;
}

// A host buffer holding elements of `dtype`; values round once on set().
class DeviceLikeBuffer {
 public:
  DeviceLikeBuffer(KernelDType dtype, std::size_t n)
      : dtype_(dtype), n_(n), bytes_(n * kernel_dtype_size(dtype) + 16) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  std::size_t size() const { return n_; }
  void set(std::size_t i, double v) {
    switch (dtype_) {
      case KernelDType::F64: put(i, v); break;
      case KernelDType::F32: put(i, static_cast<float>(v)); break;
      case KernelDType::F16: put(i, f32_to_f16_bits(static_cast<float>(v))); break;
      case KernelDType::BF16: put(i, f32_to_bf16_bits(static_cast<float>(v))); break;
    }
  }
  double get(std::size_t i) const {
    switch (dtype_) {
      case KernelDType::F64: return take<double>(i);
      case KernelDType::F32: return take<float>(i);
      case KernelDType::F16: return f16_bits_to_f32(take<uint16_t>(i));
      case KernelDType::BF16: return bf16_bits_to_f32(take<uint16_t>(i));
    }
    return 0;
  }
  void fill_random(std::mt19937& rng, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (std::size_t i = 0; i < n_; ++i) set(i, dist(rng));
  }
  void fill(double v) {
    for (std::size_t i = 0; i < n_; ++i) set(i, v);
  }

 private:
  template <typename T>
  void put(std::size_t i, T v) {
    std::memcpy(bytes_.data() + i * sizeof(T), &v, sizeof(T));
  }
  template <typename T>
  T take(std::size_t i) const {
    T v;
    std::memcpy(&v, bytes_.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  KernelDType dtype_;
  std::size_t n_;
  // std::vector<unsigned char> from operator new is 16-byte aligned on the
  // platforms we build for, which the Tensor Core kernels' vector paths need.
  std::vector<unsigned char> bytes_;
};

}  // namespace mt::test
