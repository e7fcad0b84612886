// The INT8 GEMM (Int8Gemm, kernels/gemm/api.h), dispatched: the CPU's
// (int8.cpp: oneDNN's VNNI/AMX matmul or an exact s32 loop) or the INT8
// Tensor Core rung (ladder/v9_int8_mma.cu) on sim and CUDA.
//
// On a GPU the rung runs only after passing a known-answer check on that
// device: a small ragged problem multiplied there and by the CPU's exact
// path, compared, once per device and process. The rung has only ever run on
// the simulator; a GPU where it disagrees gets an error, never silently
// wrong numbers.
#pragma once

#include <cmath>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/gemm/api.h"
#include "kernels/gemm/cpu.h"

namespace mt::kernels {

namespace detail {

// The device's int8 GEMM against the CPU's on a fixed problem whose edges
// are ragged in m, n and k; true when every output agrees to 1e-6 relative
// (both sums are exact s32: only the f32 scaling may round differently).
inline bool int8_gemm_matches_cpu(Device device) {
  const int64_t m = 70, n = 45, k = 100;
  std::vector<double> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k)), scales(static_cast<size_t>(n)),
      bias(static_cast<size_t>(n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>((i * 37 + 11) % 256);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(static_cast<int>((i * 53 + 7) % 255) - 127);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 1e-4 * static_cast<double>(i + 1);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.5 - 0.01 * static_cast<double>(i);
  const Tensor ha = from_vector(a, {m, k}, kU8), hb = from_vector(b, {n, k}, kI8);
  const Tensor hs = from_vector(scales, {n}), hbias = from_vector(bias, {n});
  Int8Gemm g{.m = m, .n = n, .k = k, .a_zero_point = 128, .activation = GemmActivation::Relu};
  const Tensor want = empty({m, n});
  g.a = static_cast<const uint8_t*>(ha.data_ptr());
  g.b = static_cast<const int8_t*>(hb.data_ptr());
  g.scales = hs.data<float>();
  g.bias = hbias.data<float>();
  cpu::int8_gemm(g, want);
  const Tensor da = ha.to(device), db = hb.to(device), ds = hs.to(device), dbias = hbias.to(device);
  const Tensor got = empty({m, n}, kF32, device);
  g.a = static_cast<const uint8_t*>(da.data_ptr());
  g.b = static_cast<const int8_t*>(db.data_ptr());
  g.scales = static_cast<const float*>(ds.data_ptr());
  g.bias = static_cast<const float*>(dbias.data_ptr());
  MT_DEVICE_CALL(Backend::Cuda, int8_gemm_v9_mma, g, got.data_ptr(), false, launch_stream(device));
  const std::vector<double> w = want.to_vector(), d = got.to(kCPU).to_vector();
  for (size_t i = 0; i < w.size(); ++i) {
    if (!(std::abs(d[i] - w[i]) <= 1e-6 * std::max(1.0, std::abs(w[i])))) return false;
  }
  return true;
}

inline void require_int8_gemm_checked(Device device) {
  static std::mutex mutex;
  static std::set<int> passed;
  const std::lock_guard<std::mutex> lock(mutex);
  if (passed.count(device.index)) return;
  MT_CHECK(int8_gemm_matches_cpu(device),
           "INT8 GEMM: the own INT8 Tensor Core kernel (ladder/v9_int8_mma.cu) failed its known-answer check on {}: "
           "refusing to run it (it has been verified on the simulator only); run INT8 models on the CPU",
           device);
  passed.insert(device.index);
}

}  // namespace detail

// out (f32 or bf16, contiguous [m, n], on the operands' device) = Int8Gemm's formula.
inline void int8_gemm(const Int8Gemm& g, const Tensor& out) {
  const Backend backend = backend_for(out.device(), "int8_gemm");
  if (backend == Backend::Cpu) return cpu::int8_gemm(g, out);
  cpu::check_int8_gemm(g, out);
  if constexpr (kCudaKernelsBuilt) {
    if (backend == Backend::Cuda) detail::require_int8_gemm_checked(out.device());
  }
  MT_DEVICE_CALL(backend, int8_gemm_v9_mma, g, out.data_ptr(), out.dtype() == kBF16, launch_stream(out.device()));
  mark_written(out);
}

}  // namespace mt::kernels
