#include "kernels/common/cpu_backend.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "kernels/common/vector_math.h"
#include "runtime/error.h"

#if MT_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace mt::kernels {
namespace {

CpuGemmLibrary parse_cpu_gemm_library() {
  const char* text = std::getenv("MT_CPU_GEMM");
  const std::string_view value = text == nullptr ? "" : text;
  if (value.empty() || value == "auto") return CpuGemmLibrary::Auto;
  if (value == "eigen") return CpuGemmLibrary::Eigen;
  if (value == "onednn") {
    MT_CHECK(onednn_built(), "MT_CPU_GEMM=onednn, but this build of mixtape has no oneDNN (install libdnnl-dev)");
    return CpuGemmLibrary::OneDnn;
  }
  fail("MT_CPU_GEMM='{}' is not one of auto, eigen, onednn", value);
}

std::atomic<int>& library_override() {
  static std::atomic<int> chosen{-1};  // -1: read MT_CPU_GEMM
  return chosen;
}

}  // namespace

CpuGemmLibrary cpu_gemm_library() {
  const int chosen = library_override().load(std::memory_order_relaxed);
  if (chosen >= 0) return static_cast<CpuGemmLibrary>(chosen);
  static const CpuGemmLibrary from_environment = parse_cpu_gemm_library();
  return from_environment;
}

void set_cpu_gemm_library(CpuGemmLibrary library) {
  MT_CHECK(library != CpuGemmLibrary::OneDnn || onednn_built(), "set_cpu_gemm_library: this build has no oneDNN");
  library_override().store(static_cast<int>(library), std::memory_order_relaxed);
}

bool onednn_built() { return MT_WITH_ONEDNN != 0; }

#if MT_WITH_ONEDNN
namespace {

struct IsaFacts {
  const char* name;
  bool bf16_native, int8_native;
};

IsaFacts isa_facts(dnnl::cpu_isa isa) {
  using dnnl::cpu_isa;
  switch (isa) {
    case cpu_isa::avx512_core_amx: return {"AVX-512 with AMX (BF16 and INT8 tiles)", true, true};
    case cpu_isa::avx512_core_bf16: return {"AVX-512 with AVX512-BF16 and VNNI", true, true};
    case cpu_isa::avx512_core_vnni: return {"AVX-512 with VNNI", false, true};
    case cpu_isa::avx2_vnni: return {"AVX2 with AVX-VNNI", false, true};
    case cpu_isa::avx512_core: return {"AVX-512", false, false};
    case cpu_isa::avx2: return {"AVX2", false, false};
    default: return {"an ISA older than AVX2", false, false};
  }
}

}  // namespace
#endif

bool onednn_int8_native() {
#if MT_WITH_ONEDNN
  return isa_facts(dnnl::get_effective_cpu_isa()).int8_native;
#else
  return false;
#endif
}

namespace {

std::string gemm_description() {
  const CpuGemmLibrary library = cpu_gemm_library();
#if MT_WITH_ONEDNN
  if (library != CpuGemmLibrary::Eigen) {
    const dnnl::version_t* v = dnnl::version();
    const IsaFacts facts = isa_facts(dnnl::get_effective_cpu_isa());
    return std::string("oneDNN ") + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (f32/bf16 GEMM and convolution, f16 widened to f32; Eigen for f64) on " +
           facts.name + "; BF16 dot products " + (facts.bf16_native ? "native" : "emulated") + ", INT8 dot products " +
           (facts.int8_native ? "native (VNNI)" : "emulated");
  }
  return "Eigen (MT_CPU_GEMM=eigen; oneDNN is built but off)";
#else
  (void)library;
  return "Eigen (this build has no oneDNN: install libdnnl-dev and reconfigure)";
#endif
}

}  // namespace

std::string cpu_backend_description() {
  return gemm_description() + "; exp/erfc " +
         (cpu::sleef_built() ? "vectorised (SLEEF)" : "scalar (libm; install libsleef-dev and reconfigure)");
}

}  // namespace mt::kernels
