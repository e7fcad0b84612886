// The element types mixtape's hand-written CUDA kernels accept, as a plain
// C++ enum, so host entry points (kernels/gemm/api.h,
// kernels/softmax/api.h) can be declared for op code that never sees a CUDA
// header. F16/BF16 data travels as 16-bit storage (std::uint16_t bits).
#pragma once

namespace mt::kernels {

enum class KernelDType : int { F64, F32, F16, BF16 };

inline const char* kernel_dtype_name(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::F64: return "f64";
    case KernelDType::F32: return "f32";
    case KernelDType::F16: return "f16";
    case KernelDType::BF16: return "bf16";
  }
  return "?";
}

}  // namespace mt::kernels
