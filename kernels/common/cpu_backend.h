// Which library runs the CPU's GEMMs and convolutions, and what the CPU
// gives it.
//
// MT_CPU_GEMM picks: `auto` (the default) runs f32 and bf16 products and
// convolutions through oneDNN where this build has it and Eigen otherwise
// (f64, f16, odd strides, and whatever oneDNN declines; a convolution's
// Eigen path is im2col + GEMM); `eigen` runs every product and convolution
// through Eigen; `onednn` is `auto` that fails instead of falling back, for
// tests. Eigen's path is bit-identical for every thread count
// (kernels/gemm/cpu.cpp, kernels/conv/cpu.cpp); `mixtape info` prints what
// oneDNN dispatches to.
#pragma once

#include <string>

namespace mt::kernels {

enum class CpuGemmLibrary { Auto, Eigen, OneDnn };

// MT_CPU_GEMM, read once; an unknown value is an error naming the variable.
CpuGemmLibrary cpu_gemm_library();

// Overrides MT_CPU_GEMM for the calling process (tests compare the two).
void set_cpu_gemm_library(CpuGemmLibrary library);

// True when this build has oneDNN.
bool onednn_built();

// True when oneDNN's INT8 products are native on this CPU (VNNI or AMX):
// u8 x s8 products then accumulate exactly in s32. (Without VNNI, AVX2's
// vpmaddubsw adds pairs of products in saturating 16 bits, so full-range
// u8 activations could saturate; the INT8 GEMM does not use oneDNN there.)
bool onednn_int8_native();

// One line for `mixtape info`: the library, the ISA oneDNN dispatches to on
// this CPU, whether BF16 and INT8 dot products are native here, and whether
// exp/erfc are vectorised (SLEEF).
std::string cpu_backend_description();

}  // namespace mt::kernels
