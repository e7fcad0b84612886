// oneDNN, the CPU back end for GEMM: the engine, a stream per thread, and
// which back end a CPU GEMM runs on. Included only by the families' onednn
// files (built when CMake found oneDNN: MT_WITH_ONEDNN).
//
// oneDNN is the library PyTorch's CPU path runs its GEMMs and convolutions
// through; it picks its kernels at run time for the CPU it finds (AVX2,
// AVX-512, AVX512-BF16's vdpbf16ps, AMX), so the build stays x86-64-v3 and a
// BF16 product is native where the CPU has the instruction.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "core/tensor.h"

namespace mt::kernels::onednn {

// The process's CPU engine.
const dnnl::engine& engine();

// The calling thread's in-order stream on it (oneDNN primitives may run from
// several threads at once, each with its own stream).
dnnl::stream& stream();

// The oneDNN data type of a mixtape dtype it computes in (f32, bf16), or none.
std::optional<dnnl::memory::data_type> data_type(DType dtype);

}  // namespace mt::kernels::onednn
