// The INT8 GEMM (Int8Gemm, kernels/gemm/api.h), dispatched: the CPU's
// (int8.cpp: oneDNN's VNNI/AMX matmul or an exact s32 loop) or the INT8
// Tensor Core rung (ladder/v9_int8_mma.cu) on sim and CUDA.
//
// On a GPU the rung runs only where it has passed its known-answer check on
// that device (kernels/verify: a small ragged problem multiplied there and by
// the CPU's exact path, in a child process, the result cached). There is no
// vendor INT8 path here yet, so an unverified GPU gets an error, never
// silently wrong numbers.
#pragma once

#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/cpu.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

// out (f32 or bf16, contiguous [m, n], on the operands' device) = Int8Gemm's formula.
inline void int8_gemm(const Int8Gemm& g, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "int8_gemm");
  if (backend == Backend::Cpu) return cpu::int8_gemm(g, out);
  cpu::check_int8_gemm(g, out);
  MT_CHECK(out.dtype() != kU8, "INT8 GEMM: a requantized u8 output is the CPU's only (on {} it is f32 or bf16)",
           out.device());
  MT_CHECK(
      verify::own_family_trusted(verify::OwnFamily::Int8Mma, out.device()),
      "INT8 GEMM: the INT8 Tensor Core kernel (ladder/v9_int8_mma.cu) has not passed its check on {} (it has "
      "been verified on the simulator only): run `mixtape info --verify --device {}`, or run INT8 models on the CPU",
      out.device(), out.device());
  MT_DEVICE_CALL(backend, int8_gemm_v9_mma, g, out.data_ptr(), out.dtype() == kBF16, launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
