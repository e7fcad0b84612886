// The INT8 GEMM (Int8Gemm, kernels/gemm/api.h), dispatched: the CPU's
// (int8.cpp: oneDNN's VNNI/AMX matmul or an exact s32 loop), or on sim and
// CUDA one of two paths with the same result bit for bit:
//   the own rung: the INT8 Tensor Core kernel (ladder/v9_int8_mma.cu);
//   the vendor path: cuBLASLt's s8 GEMM between an own u8 -> s8 shift and
//     an own epilogue (int8_vendor.cu; on the simulator a plain s8 loop
//     stands in for cuBLASLt).
// MT_GEMM picks: own or cublaslt (the user's explicit choice, run as asked;
// on the simulator cublaslt runs the stand-in), or auto (unset): on plain
// sim the own rung, as for float GEMMs; where kernels need verifying (a GPU,
// or sim posing as one) the vendor path where it is verified and takes the
// shape, else the rung where it is verified. cuBLASLt's INT8 kernels are
// the vendor's tuned ones and v9 is the ladder's first INT8 rung (no
// shared-memory staging), so the vendor path is expected to be faster;
// neither has run on a GPU yet, so that order is not measured
// (gemm_bench --dtypes int8 times both).
//
// Both paths run own kernels, so on a GPU auto runs each only where it has
// passed its known-answer check on that device (kernels/verify: a small problem
// multiplied there and by the CPU's exact path, in a child process, the
// result cached): with neither verified, INT8 is an error, never silently
// wrong numbers.
#pragma once

#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/cpu.h"
#include "kernels/verify/trust.h"

namespace mt::kernels {

enum class Int8GemmPath { OwnRung, Vendor };

// The path int8_gemm takes for `g` on `device` (sim or CUDA); an mt::Error
// when cublaslt is asked for a shape it does not take, or under auto when no
// path may run there.
inline Int8GemmPath int8_gemm_path(const Int8Gemm& g, Device device) {
  using verify::OwnFamily;
  const GemmBackend forced = gemm_backend_from_environment();
  if (forced == GemmBackend::Own) return Int8GemmPath::OwnRung;  // the user's explicit choice, as for float GEMMs
  const bool vendor_takes = int8_vendor_takes(g);
  if (forced == GemmBackend::CublasLt) {
    MT_CHECK(vendor_takes,
             "MT_GEMM=cublaslt: cuBLASLt's INT8 GEMM needs k > 0, n and k multiples of 4 and a 4-byte aligned weight "
             "(got n={}, k={})",
             g.n, g.k);
    return Int8GemmPath::Vendor;
  }
  if (device.is_sim() && !verify::identity_for(device)) return Int8GemmPath::OwnRung;  // plain sim: own kernels
  if (vendor_takes && verify::own_family_trusted(OwnFamily::Int8Vendor, device)) return Int8GemmPath::Vendor;
  if (vendor_takes) verify::warn_untrusted(OwnFamily::Int8Vendor, device);
  MT_CHECK(verify::own_family_trusted(OwnFamily::Int8Mma, device),
           "INT8 GEMM: neither the INT8 Tensor Core rung (int8.v9) nor the cuBLASLt path (int8.cublaslt{}) has "
           "passed its check on {} (both have been verified on the simulator only): run `mixtape info --verify "
           "--device {}`, or run INT8 models on the CPU",
           vendor_takes ? "" : ", which needs n and k multiples of 4", device, device);
  return Int8GemmPath::OwnRung;
}

// The vendor path into out (f32 or bf16 [m, n] on sim or CUDA, checked by
// the caller), its scratch from the device's allocator.
inline void int8_gemm_by_vendor_path(const Int8Gemm& g, const Tensor& out) {
  const Tensor a_s8 = empty({g.m, g.k}, kI8, out.device()), weight_sums = empty({g.n}, kI32, out.device()),
               product = empty({g.m, g.n}, kI32, out.device());
  const Int8VendorScratch scratch{.a_s8 = static_cast<int8_t*>(a_s8.data_ptr()),
                                  .weight_sums = static_cast<int32_t*>(weight_sums.data_ptr()),
                                  .product = static_cast<int32_t*>(product.data_ptr())};
  MT_DEVICE_CALL(backend_for(out.device(), "int8_gemm"), int8_gemm_vendor, g, scratch, out.data_ptr(),
                 out.dtype() == kBF16, launch_stream(out.device()));
  mark_written(out);
}

// out (f32 or bf16, contiguous [m, n], on the operands' device) = Int8Gemm's formula.
inline void int8_gemm(const Int8Gemm& g, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "int8_gemm");
  if (backend == Backend::Cpu) return cpu::int8_gemm(g, out);
  cpu::check_int8_gemm(g, out);
  MT_CHECK(out.dtype() != kU8, "INT8 GEMM: a requantized u8 output is the CPU's only (on {} it is f32 or bf16)",
           out.device());
  if (int8_gemm_path(g, out.device()) == Int8GemmPath::Vendor) return int8_gemm_by_vendor_path(g, out);
  MT_DEVICE_CALL(backend, int8_gemm_v9_mma, g, out.data_ptr(), out.dtype() == kBF16, launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
