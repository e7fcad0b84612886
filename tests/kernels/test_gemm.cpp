// The GEMM ladder (kernels/gemm/ladder) and the production gemm() entry, run on
// the SIMT simulator and compared with a double-precision CPU reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "kernels/gemm/api.h"
#include "tests/kernels/gemm_test_util.h"

namespace {

using mt::kernels::GemmActivation;
using mt::kernels::GemmArgs;
using mt::kernels::GemmBackend;
using mt::kernels::KernelDType;
using mt::test::DeviceLikeBuffer;
using GemmFn = std::function<void(const GemmArgs&, mt::kernels::Stream)>;

struct Problem {
  int batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool bias = false, relu = false;
  int pad = 0;                                 // extra elements per leading dimension
  GemmActivation gelu = GemmActivation::None;  // GeluErf / GeluTanh instead of relu
  bool store_pre = false;                      // also store the pre-activation Z
  bool align8 = false;                         // round every leading dimension up to a multiple of 8 (TMA's rule)
};

int64_t leading(const Problem& p, int64_t width) {
  const int64_t ld = width + p.pad;
  return p.align8 ? (ld + 7) / 8 * 8 : ld;
}

double reference_activation(const Problem& p, double z) {
  if (p.gelu == GemmActivation::GeluErf) return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  if (p.gelu == GemmActivation::GeluTanh) {
    return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
  }
  return p.relu && z < 0 ? 0 : z;
}

// Runs `fn` on random data and checks every output against a double reference
// computed from the (already rounded) inputs.
void check_gemm(const GemmFn& fn, KernelDType dtype, const Problem& p, unsigned seed = 1) {
  const int64_t lda = leading(p, p.trans_a ? p.m : p.k);
  const int64_t ldb = leading(p, p.trans_b ? p.k : p.n);
  const int64_t ldc = leading(p, p.n);
  const int64_t a_rows = p.trans_a ? p.k : p.m, b_rows = p.trans_b ? p.n : p.k;
  const int64_t stride_a = a_rows * lda, stride_b = b_rows * ldb, stride_c = p.m * ldc;
  std::mt19937 rng(seed);
  DeviceLikeBuffer a(dtype, static_cast<size_t>(stride_a * p.batch)), b(dtype, static_cast<size_t>(stride_b * p.batch));
  DeviceLikeBuffer c(dtype, static_cast<size_t>(stride_c * p.batch)), bias(dtype, static_cast<size_t>(p.n));
  a.fill_random(rng);
  b.fill_random(rng);
  bias.fill_random(rng);
  DeviceLikeBuffer pre(dtype, static_cast<size_t>(stride_c * p.batch));
  c.fill(4096.0);  // padding must survive (4096 is exact in every dtype)
  pre.fill(4096.0);

  GemmArgs args;
  args.dtype = dtype;
  args.batch = p.batch;
  args.m = p.m, args.n = p.n, args.k = p.k;
  args.a = a.data(), args.lda = lda, args.batch_stride_a = stride_a, args.trans_a = p.trans_a;
  args.b = b.data(), args.ldb = ldb, args.batch_stride_b = stride_b, args.trans_b = p.trans_b;
  args.c = c.data(), args.ldc = ldc, args.batch_stride_c = stride_c;
  args.bias = p.bias ? bias.data() : nullptr;
  args.activation = p.gelu != GemmActivation::None ? p.gelu : p.relu ? GemmActivation::Relu : GemmActivation::None;
  args.pre_activation = p.store_pre ? pre.data() : nullptr;
  fn(args, {});

  const double out_eps = dtype == KernelDType::BF16  ? 1.0 / 128
                         : dtype == KernelDType::F16 ? 1.0 / 1024
                         : dtype == KernelDType::F32 ? 1e-6
                                                     : 1e-14;
  const double sum_eps = dtype == KernelDType::F64 ? 1e-13 : 1e-5;
  int bad = 0;
  for (int bi = 0; bi < p.batch; ++bi) {
    for (int i = 0; i < p.m; ++i) {
      for (int j = 0; j < p.n; ++j) {
        double ref = 0, mag = 0;
        for (int kk = 0; kk < p.k; ++kk) {
          const double x = a.get(static_cast<size_t>(bi * stride_a + (p.trans_a ? kk * lda + i : i * lda + kk)));
          const double y = b.get(static_cast<size_t>(bi * stride_b + (p.trans_b ? j * ldb + kk : kk * ldb + j)));
          ref += x * y;
          mag += std::abs(x * y);
        }
        if (p.bias) ref += bias.get(static_cast<size_t>(j));
        const double z = ref;
        ref = reference_activation(p, z);
        const size_t at = static_cast<size_t>(bi * stride_c + i * ldc + j);
        const double got = c.get(at);
        // GELU's slope is at most ~1.13, so the error in z carries over.
        const double tol = out_eps * std::abs(ref) + 1.2 * sum_eps * (mag + 1);
        if (!(std::abs(got - ref) <= tol) && ++bad <= 5) {
          UNSCOPED_INFO("C[" << bi << "][" << i << "][" << j << "] = " << got << ", expected " << ref);
        }
        const double z_tol = out_eps * std::abs(z) + sum_eps * (mag + 1);
        if (p.store_pre && !(std::abs(pre.get(at) - z) <= z_tol) && ++bad <= 5) {
          UNSCOPED_INFO("Z[" << bi << "][" << i << "][" << j << "] = " << pre.get(at) << ", expected " << z);
        }
        if (!p.store_pre && pre.get(at) != 4096.0 && ++bad <= 5) {
          UNSCOPED_INFO("Z[" << bi << "][" << i << "][" << j << "] written without being asked for");
        }
      }
      for (int j = p.n; j < ldc; ++j) {  // padding columns untouched
        const size_t at = static_cast<size_t>(bi * stride_c + i * ldc + j);
        if ((c.get(at) != 4096.0 || pre.get(at) != 4096.0) && ++bad <= 5) {
          UNSCOPED_INFO("padding C/Z[" << bi << "][" << i << "][" << j << "] was overwritten");
        }
      }
    }
  }
  CHECK(bad == 0);
}

struct Version {
  const char* name;
  GemmFn fn;
  bool all_dtypes;
};

std::vector<Version> versions() {
  return {{"v1_naive", mt::sim::gemm_v1_naive, true},
          {"v2_shared_tiles", mt::sim::gemm_v2_shared_tiles, true},
          {"v3_register_blocking", mt::sim::gemm_v3_register_blocking, true},
          {"v4_tensor_core", mt::sim::gemm_v4_tensor_core, false},
          {"v5_pipelined", mt::sim::gemm_v5_pipelined, false}};
}

const char* layout_name(bool ta, bool tb) { return ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"); }

}  // namespace

TEST_CASE("every GEMM version matches the CPU reference for f16 and bf16, all layouts", "[gemm][sim]") {
  for (const auto& v : versions()) {
    for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        for (const auto& [m, n, k] : {std::tuple{64, 48, 40}, std::tuple{37, 29, 23}}) {
          INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype) << " " << layout_name(ta, tb) << " " << m << "x"
                      << n << "x" << k);
          check_gemm(v.fn, dtype, Problem{1, m, n, k, ta, tb});
        }
      }
    }
  }
}

TEST_CASE("scalar GEMM versions (v1-v3) handle f32 and f64", "[gemm][sim]") {
  for (const auto& v : versions()) {
    if (!v.all_dtypes) continue;
    for (KernelDType dtype : {KernelDType::F32, KernelDType::F64}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype) << " " << layout_name(ta, tb));
        check_gemm(v.fn, dtype, Problem{1, 37, 29, 23, ta, tb});
        check_gemm(v.fn, dtype, Problem{2, 64, 48, 40, ta, tb, true, true});
      }
    }
  }
}

TEST_CASE("GEMM versions: batched with bias and ReLU epilogue", "[gemm][sim]") {
  for (const auto& v : versions()) {
    for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16}) {
      INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype));
      check_gemm(v.fn, dtype, Problem{3, 37, 29, 23, false, false, true, true});
      check_gemm(v.fn, dtype, Problem{2, 64, 48, 40, false, true, true, false});
      check_gemm(v.fn, dtype, Problem{2, 64, 48, 40, true, false, false, true});
    }
  }
}

// Catches: a GELU epilogue using the wrong form (tanh for erf), applied
// after rounding, or storing Z after the activation (GELU's backward would
// then read gelu(z) for z); a pre-activation written when not asked for.
TEST_CASE("GEMM versions: GELU epilogue (erf and tanh forms) with the pre-activation stored", "[gemm][sim]") {
  for (const auto& v : versions()) {
    for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16, KernelDType::F32}) {
      if (dtype == KernelDType::F32 && !v.all_dtypes) continue;
      INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype));
      Problem erf{2, 37, 29, 23, false, true, true, false, /*pad=*/1, GemmActivation::GeluErf, true};
      check_gemm(v.fn, dtype, erf);
      Problem tanh_form{1, 40, 24, 16, true, false, false, false, 0, GemmActivation::GeluTanh, false};
      check_gemm(v.fn, dtype, tanh_form);
      Problem relu_pre{1, 33, 17, 8, false, false, true, true, 0, GemmActivation::None, true};
      check_gemm(v.fn, dtype, relu_pre);
    }
  }
}

TEST_CASE("Tensor Core GEMMs: padded leading dimensions take the aligned cp.async path with partial chunks",
          "[gemm][sim]") {
  for (const auto& v : versions()) {
    if (v.all_dtypes) continue;
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      INFO(v.name << " " << layout_name(ta, tb));
      // M, N, K ragged (39, 31, 23), every leading dimension padded by 1 to a multiple of 8.
      Problem p{2, 39, 31, 23, ta, tb, true, false, /*pad=*/1};
      check_gemm(v.fn, KernelDType::F16, p);
      // K = 200: 7 k-slices, so every pipeline stage is refilled while others are read.
      check_gemm(v.fn, KernelDType::BF16, Problem{1, 130, 136, 200, ta, tb, false, false, 0});
    }
  }
}

TEST_CASE("GEMM versions: K = 0 gives the epilogue of a zero product, empty shapes do nothing", "[gemm][sim]") {
  for (const auto& v : versions()) {
    INFO(v.name);
    check_gemm(v.fn, KernelDType::F16, Problem{2, 5, 7, 0, false, false, true, true});
    check_gemm(v.fn, KernelDType::BF16, Problem{1, 0, 7, 3});
  }
}

TEST_CASE("Tensor Core GEMMs reject f32 and f64", "[gemm][sim]") {
  DeviceLikeBuffer a(KernelDType::F32, 64), b(KernelDType::F32, 64), c(KernelDType::F32, 64);
  GemmArgs args;
  args.dtype = KernelDType::F32;
  args.m = args.n = args.k = 8;
  args.a = a.data(), args.b = b.data(), args.c = c.data();
  args.lda = args.ldb = args.ldc = 8;
  CHECK_THROWS_WITH(mt::sim::gemm_v5_pipelined(args, {}), Catch::Contains("f16 or bf16"));
  CHECK_THROWS_WITH(mt::sim::gemm_v4_tensor_core(args, {}), Catch::Contains("f16 or bf16"));
  args.lda = 4;
  CHECK_THROWS_WITH(mt::sim::gemm_v1_naive(args, {}), Catch::Contains("leading dimension"));
}

TEST_CASE("production gemm() picks an own kernel for every dtype on the simulator", "[gemm][sim]") {
  const auto production = [](const GemmArgs& args, mt::kernels::Stream s) {
    mt::sim::gemm(args, GemmBackend::Auto, s);
  };
  for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16, KernelDType::F32, KernelDType::F64}) {
    INFO(mt::kernels::kernel_dtype_name(dtype));
    check_gemm(production, dtype, Problem{2, 37, 29, 23, true, false, true, true});
  }
  CHECK(std::string(mt::sim::gemm_backend_name(GemmBackend::Auto)) == "own");
  ::setenv("MT_GEMM", "cublaslt", 1);
  CHECK(std::string(mt::sim::gemm_backend_name(GemmBackend::Auto)) == "own");  // no cuBLASLt on the sim
  ::setenv("MT_GEMM", "bogus", 1);
  CHECK_THROWS_WITH(mt::sim::gemm_backend_name(GemmBackend::Auto), Catch::Contains("MT_GEMM"));
  ::unsetenv("MT_GEMM");
  DeviceLikeBuffer one(KernelDType::F32, 1);
  GemmArgs args;
  args.dtype = KernelDType::F32;
  args.m = args.n = args.k = 1;
  args.a = args.b = args.c = one.data();
  args.lda = args.ldb = args.ldc = 1;
  CHECK_THROWS_WITH(mt::sim::gemm(args, GemmBackend::CublasLt, {}), Catch::Contains("GPU"));
  // Catches: gemm() handing an invalid request to a back end instead of refusing it.
  args.c = nullptr;
  CHECK_THROWS_WITH(mt::sim::gemm(args, GemmBackend::Auto, {}), Catch::Contains("null output"));
  args.c = one.data();
  args.c_is_f32 = true;
  args.activation = GemmActivation::Relu;  // an f32 C carries no epilogue
  CHECK_THROWS_WITH(mt::sim::gemm(args, GemmBackend::Auto, {}), Catch::Contains("c_is_f32"));
}

// ---- mt::kernels::bmm on the sim device (Tensor level, through autograd) ----

#include "kernels/gemm/matmul.h"
#include "tests/kernels/sim_tensor_util.h"

TEST_CASE("matmul on the sim device matches the CPU for every dtype, transposed views and batches", "[gemm][sim]") {
  using namespace mt;
  for (DType dtype : {kF16, kBF16, kF32, kF64}) {
    INFO(dtype_name(dtype));
    const Tensor a_cpu = test::random_tensor({3, 37, 23}, dtype, kCPU, 1);
    const Tensor b_cpu = test::random_tensor({3, 29, 23}, dtype, kCPU, 2);
    const Tensor a_sim = a_cpu.to(kSIM).requires_grad_(), b_sim = b_cpu.to(kSIM).requires_grad_();
    const Tensor a_ref = a_cpu.clone().requires_grad_(), b_ref = b_cpu.clone().requires_grad_();
    // A @ B^T: B^T is a column-major view, read in place (NT).
    const Tensor c_sim = matmul(a_sim, b_sim.transpose(1, 2));
    const Tensor c_ref = matmul(a_ref, b_ref.transpose(1, 2));
    CHECK(c_sim.device() == kSIM);
    CHECK(c_sim.dtype() == dtype);
    CHECK(test::relative_difference(c_sim, c_ref) <= test::dtype_tolerance(dtype));
    // Backward runs dA = dC @ B (NN) and dB^T = A^T @ dC (TN) on the sim device too.
    sum(mul(c_sim, c_sim)).backward();
    sum(mul(c_ref, c_ref)).backward();
    CHECK(test::relative_difference(a_sim.grad(), a_ref.grad()) <= 4 * test::dtype_tolerance(dtype));
    CHECK(test::relative_difference(b_sim.grad(), b_ref.grad()) <= 4 * test::dtype_tolerance(dtype));
  }
}

TEST_CASE("kernels::bmm on the sim device copies strided operands and writes strided outputs", "[gemm][sim]") {
  using namespace mt;
  // Every other column of a wider matrix: neither row- nor column-major.
  const Tensor wide = test::random_tensor({2, 16, 24}, kF16, kCPU, 3);
  const Tensor a_cpu = wide.slice(2, 0, 24, 2);  // [2, 16, 12], strides (384, 24, 2)
  const Tensor b_cpu = test::random_tensor({2, 12, 10}, kF16, kCPU, 4);
  const Tensor out_cpu = empty({2, 16, 10}, kF16, kCPU);
  kernels::bmm(a_cpu, b_cpu, out_cpu);
  const Tensor a_sim = wide.to(kSIM).slice(2, 0, 24, 2), b_sim = b_cpu.to(kSIM);
  const Tensor out_sim = empty({2, 10, 16}, kF16, kSIM).transpose(1, 2);  // a column-major output
  kernels::bmm(a_sim, b_sim, out_sim);
  CHECK(test::relative_difference(out_sim, out_cpu) <= test::dtype_tolerance(kF16));
}

// ---- shared-memory hazards: the simulator's race checker over the ladder ----

#include "runtime/sim/runtime.h"

TEST_CASE("GEMM versions have no shared-memory races (simulator race checker)", "[gemm][sim][racecheck]") {
  const bool was_enabled = mt::simulator::racecheck_enabled();
  mt::simulator::set_racecheck_enabled(true);
  (void)mt::simulator::take_race_reports();
  for (const auto& v : versions()) {
    for (int layout = 0; layout < 4; ++layout) {
      INFO(v.name << " " << layout_name(layout & 1, layout & 2));
      // 7 k-slices: v5 refills each pipeline stage while the others are read.
      check_gemm(v.fn, KernelDType::F16, Problem{1, 70, 40, 200, bool(layout & 1), bool(layout & 2)});
      const auto races = mt::simulator::take_race_reports();
      CHECK(races.empty());
    }
  }
  mt::simulator::set_racecheck_enabled(was_enabled);
}

// ---- v6, v7: TMA + wgmma (Hopper), on the simulator's tensor maps and wgmma ----

namespace {
Problem tma_problem(int batch, int m, int n, int k, bool ta, bool tb) {
  Problem p{batch, m, n, k, ta, tb};
  p.align8 = true;
  return p;
}

std::vector<Version> hopper_versions() {
  return {{"v6_tma_wgmma", mt::sim::gemm_v6_tma_wgmma, false},
          {"v7_warp_specialized", mt::sim::gemm_v7_warp_specialized, false},
          {"v8_clusters", mt::sim::gemm_v8_clusters, false}};
}
}  // namespace

// Catches: a descriptor that disagrees with the tile TMA wrote (swizzle mode,
// SBO/LBO, the k16 step), the wrong wgmma transpose bit for a layout, a box
// coordinate swapped (inner/outer), boxes of the second M/N half misplaced.
TEST_CASE("Hopper GEMMs (v6, v7) match the CPU reference for f16 and bf16, all layouts", "[gemm][sim]") {
  for (const auto& v : hopper_versions()) {
    for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype) << " " << layout_name(ta, tb));
        check_gemm(v.fn, dtype, tma_problem(1, 64, 48, 40, ta, tb));
        // Ragged edges on every side: TMA's zero fill must stand in for the missing rows, columns and k.
        check_gemm(v.fn, dtype, tma_problem(1, 39, 31, 23, ta, tb));
      }
    }
  }
}

// Catches: refilling (v6) or freeing (v7) a stage wgmma is still reading,
// a wrong phase parity when a stage is used the second and third time,
// more than one block tile in M and N.
TEST_CASE("Hopper GEMMs: many K slices cycle every pipeline stage, several block tiles", "[gemm][sim]") {
  for (const auto& v : hopper_versions()) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      INFO(v.name << " " << layout_name(ta, tb));
      // K = 600: 10 slices of 64 through 4 stages (each stage's barrier completes 2-3 phases).
      check_gemm(v.fn, KernelDType::BF16, tma_problem(1, 130, 136, 600, ta, tb));
    }
  }
}

// Catches: v7's/v8's persistent walk skipping or repeating tiles (grouped
// order, batch boundaries, v8's pairs of tile-rows and a pair hanging past M),
// the stage ring or its parities restarting per tile instead of carrying on,
// a consumer storing another consumer's rows, v8 freeing a stage before the
// other block's consumers are done with it or multicasting B halves to the
// wrong offset.
TEST_CASE("GEMM v7, v8: persistent blocks walk several tiles of several batches", "[gemm][sim]") {
  const std::vector<Version> rungs = {hopper_versions()[1], hopper_versions()[2]};
  for (const auto& v : rungs) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      INFO(v.name << " " << layout_name(ta, tb));
      // 2 x 2 tiles per batch, 3 batches: 12 tiles (v8: 6 pairs) for the simulator's 4 blocks; 3 slices per tile.
      Problem p = tma_problem(3, 250, 300, 136, ta, tb);
      p.bias = true;
      check_gemm(v.fn, KernelDType::F16, p);
      // 3 tile-rows: v8's second pair has a block past M.
      check_gemm(v.fn, KernelDType::BF16, tma_problem(1, 300, 136, 200, ta, tb));
    }
  }
}

TEST_CASE("Hopper GEMMs: batched (3-d tensor maps) with bias, ReLU and GELU epilogues", "[gemm][sim]") {
  for (const auto& v : hopper_versions()) {
    for (KernelDType dtype : {KernelDType::F16, KernelDType::BF16}) {
      INFO(v.name << " " << mt::kernels::kernel_dtype_name(dtype));
      Problem relu = tma_problem(3, 37, 29, 23, false, false);
      relu.bias = relu.relu = true;
      check_gemm(v.fn, dtype, relu);
      Problem gelu = tma_problem(2, 40, 24, 72, true, true);
      gelu.bias = true;
      gelu.gelu = GemmActivation::GeluErf;
      gelu.store_pre = true;
      check_gemm(v.fn, dtype, gelu);
      check_gemm(v.fn, dtype, Problem{2, 5, 8, 0, false, false, true, true, 0});  // K = 0
    }
  }
}

// Catches: the Hopper rungs run on operands TMA cannot address (they would
// read misaligned rows), and gemm_hopper_supports saying yes to them.
TEST_CASE("Hopper GEMMs refuse what TMA cannot read", "[gemm][sim]") {
  DeviceLikeBuffer a(KernelDType::F16, 1024), b(KernelDType::F16, 1024), c(KernelDType::F16, 1024);
  GemmArgs args;
  args.dtype = KernelDType::F16;
  args.m = args.n = 16;
  args.k = 12;
  args.a = a.data(), args.b = b.data(), args.c = c.data();
  args.lda = 12, args.ldb = 16, args.ldc = 16;  // lda not a multiple of 8
  CHECK_FALSE(mt::sim::gemm_hopper_supports(args));
  for (const auto& v : hopper_versions()) CHECK_THROWS_WITH(v.fn(args, {}), Catch::Contains("TMA"));
  args.lda = 16;
  CHECK(mt::sim::gemm_hopper_supports(args));
  args.batch = 2, args.batch_stride_a = 20, args.batch_stride_b = 256, args.batch_stride_c = 256;
  CHECK_FALSE(mt::sim::gemm_hopper_supports(args));  // batch stride not a multiple of 8
  args.batch = 1;
  args.dtype = KernelDType::F32;
  CHECK_FALSE(mt::sim::gemm_hopper_supports(args));
}

TEST_CASE("Hopper GEMMs have no shared-memory races (simulator race checker)", "[gemm][sim][racecheck]") {
  const bool was_enabled = mt::simulator::racecheck_enabled();
  mt::simulator::set_racecheck_enabled(true);
  (void)mt::simulator::take_race_reports();
  for (const auto& v : hopper_versions()) {
    for (int layout = 0; layout < 4; ++layout) {
      INFO(v.name << " " << layout_name(layout & 1, layout & 2));
      check_gemm(v.fn, KernelDType::F16, tma_problem(1, 70, 40, 330, bool(layout & 1), bool(layout & 2)));
      CHECK(mt::simulator::take_race_reports().empty());
    }
  }
  mt::simulator::set_racecheck_enabled(was_enabled);
}

// ---- MT_GEMM=auto: the measured, cached choice per shape ----

#include "kernels/gemm/gemm_choice.h"

// Catches: the slower back end chosen, a shape measured again on every call,
// two shapes sharing one verdict, and an own kernel that is fast but wrong
// being chosen.
TEST_CASE("GEMM auto choice: the faster back end that agrees with cuBLASLt, measured once per shape", "[gemm]") {
  mt::kernels::GemmChooser chooser;
  int measured = 0;
  double own_ms = 1.0, cublaslt_ms = 2.0;
  bool agrees = true;
  const auto measure = [&](GemmBackend backend) {
    ++measured;
    return backend == GemmBackend::Own ? own_ms : cublaslt_ms;
  };
  const auto own_agrees = [&] { return agrees; };
  const mt::kernels::GemmShape square{KernelDType::F16, 1, 4096, 4096, 4096, false, true, true, false};
  CHECK(chooser.choose(square, measure, own_agrees) == GemmBackend::Own);
  CHECK(measured == 2);
  own_ms = 5.0;  // remembered, not measured again
  CHECK(chooser.choose(square, measure, own_agrees) == GemmBackend::Own);
  CHECK(measured == 2);

  mt::kernels::GemmShape skinny = square;
  skinny.m = 64;  // another shape: its own trial
  CHECK(chooser.choose(skinny, measure, own_agrees) == GemmBackend::CublasLt);
  CHECK(measured == 4);

  mt::kernels::GemmShape wrong = square;
  wrong.trans_b = false;
  own_ms = 0.5;
  agrees = false;  // fastest, but its output differs from cuBLASLt's
  CHECK(chooser.choose(wrong, measure, own_agrees) == GemmBackend::CublasLt);
  const auto trial = chooser.find(wrong);
  REQUIRE(trial.has_value());
  CHECK_FALSE(trial->own_agrees);
  CHECK(trial->own_ms == 0.5);
  CHECK(chooser.trials().size() == 3);
}
