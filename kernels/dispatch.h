// Device dispatch for kernel families. Each kernels/<family>.h declares the
// family's per-device implementations and a dispatching entry point; op code
// (autograd/) calls only the entry point.
#pragma once

#include "core/tensor.h"

namespace mt::kernels {

enum class Backend { Cpu, Cuda };

// Which backend runs a kernel whose output lives on `device`. CPU tensors run
// the CPU kernels; CUDA and SIM tensors run the CUDA kernels (on the GPU or in
// the SIMT simulator), which arrive with the CUDA backend.
inline Backend backend_for(Device device, const char* kernel) {
  if (device.is_cpu()) return Backend::Cpu;
  fail("{}: no kernel for device {} in this build (the CUDA backend is not built yet); use the CPU", kernel,
       device);
}

}  // namespace mt::kernels
