// The CPU GEMM's two libraries (kernels/gemm/cpu.cpp: oneDNN for f32 and
// bf16 where the build has it, Eigen otherwise) against an f64 reference:
// every operand layout, batch broadcasting, the bias/ReLU/GELU epilogue and
// the stored pre-activation, and bf16 products rounded once.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "kernels/common/cpu_backend.h"
#include "kernels/gemm/matmul.h"
#include "tests/kernels/cpu_library_util.h"

using namespace mt;
using kernels::CpuGemmLibrary;
using kernels::GemmActivation;
using test::as_f64;
using test::relative_error;
using test::UseLibrary;

namespace {

double gelu_erf(double z) { return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))); }

// out[i] = epilogue(a[i] @ b[i] + bias) in f64 from the operands' own values
// (the bf16 values, when bf16); a batch of 1 broadcasts.
std::vector<double> reference(const Tensor& a, const Tensor& b, const Tensor& bias, GemmActivation activation,
                              bool keep_pre_activation) {
  const int64_t batch = std::max(a.size(0), b.size(0)), m = a.size(1), k = a.size(2), n = b.size(2);
  const std::vector<double> av = as_f64(a), bv = as_f64(b);
  const std::vector<double> biasv = bias.defined() ? as_f64(bias) : std::vector<double>(n, 0.0);
  std::vector<double> out(batch * m * n);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t ia = a.size(0) == 1 ? 0 : i, ib = b.size(0) == 1 ? 0 : i;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double z = biasv[c];
        for (int64_t j = 0; j < k; ++j) z += av[(ia * m + r) * k + j] * bv[(ib * k + j) * n + c];
        if (!keep_pre_activation && activation == GemmActivation::Relu) z = std::max(z, 0.0);
        if (!keep_pre_activation && activation == GemmActivation::GeluErf) z = gelu_erf(z);
        out[(i * m + r) * n + c] = z;
      }
    }
  }
  return out;
}

// A [batch, rows, cols] operand in the given layout (a transposed view when
// column-major), its values rounded to `dtype`.
Tensor operand(int64_t batch, int64_t rows, int64_t cols, DType dtype, bool column_major, Generator& gen) {
  const auto uniform = [&](const Shape& shape) { return mul(sub(rand(shape, kF32, kCPU, &gen), 0.5), 2.0).to(dtype); };
  if (!column_major) return uniform({batch, rows, cols});
  return uniform({batch, cols, rows}).transpose(1, 2);
}

}  // namespace

TEST_CASE("CPU GEMM in f32 and bf16 matches f64 in every layout with oneDNN and Eigen (transpose bugs)",
          "[kernels][gemm][cpu]") {
  for (const CpuGemmLibrary library : test::cpu_libraries()) {
    const UseLibrary use(library);
    for (const DType dtype : {kF32, kBF16}) {
      for (const bool a_columns : {false, true}) {
        for (const bool b_columns : {false, true}) {
          INFO(test::library_name(library)
               << " " << dtype_name(dtype) << " a column-major " << a_columns << " b column-major " << b_columns);
          Generator gen(11);
          const Tensor a = operand(3, 37, 70, dtype, a_columns, gen);
          const Tensor b = operand(3, 70, 45, dtype, b_columns, gen);
          const Tensor out = empty({3, 37, 45}, dtype, kCPU);
          kernels::bmm(a, b, out);
          // f32: the sum's own rounding; bf16: one rounding of each output (2^-8 relative).
          CHECK(relative_error(out, reference(a, b, Tensor(), GemmActivation::None, false)) <
                (dtype == kF32 ? 1e-5 : 8e-3));
        }
      }
    }
  }
}

TEST_CASE("CPU GEMM: a batch-broadcast operand (batch stride 0) multiplies every batch (broadcast bug)",
          "[kernels][gemm][cpu]") {
  for (const CpuGemmLibrary library : test::cpu_libraries()) {
    const UseLibrary use(library);
    INFO(test::library_name(library));
    Generator gen(12);
    const Tensor a = operand(4, 20, 33, kF32, false, gen);
    const Tensor shared = operand(1, 33, 17, kF32, false, gen);
    const Tensor b = shared.expand({4, 33, 17});
    REQUIRE(b.stride(0) == 0);
    const Tensor out = empty({4, 20, 17}, kF32, kCPU);
    kernels::bmm(a, b, out);
    CHECK(relative_error(out, reference(a, shared, Tensor(), GemmActivation::None, false)) < 1e-5);
  }
}

TEST_CASE("CPU GEMM epilogue: bias, ReLU, GELU and the stored pre-activation with oneDNN and Eigen (epilogue bugs)",
          "[kernels][gemm][cpu]") {
  for (const CpuGemmLibrary library : test::cpu_libraries()) {
    const UseLibrary use(library);
    for (const DType dtype : {kF32, kBF16}) {
      for (const GemmActivation activation : {GemmActivation::None, GemmActivation::Relu, GemmActivation::GeluErf}) {
        for (const bool keep_pre : {false, true}) {
          INFO(test::library_name(library) << " " << dtype_name(dtype) << " activation " << static_cast<int>(activation)
                                           << " pre-activation kept " << keep_pre);
          // [1, 128, 128] x [128, 512] is cut into two column tiles on the
          // Eigen path (kernels/gemm/cpu.cpp's gemm_tiles): the second one's
          // epilogue starts at column 256 and must read bias[256 + j].
          struct Shape3 {
            int64_t batch, m, k, n;
          };
          for (const Shape3 s : {Shape3{2, 24, 40, 30}, Shape3{1, 128, 128, 512}}) {
            Generator gen(13);
            const Tensor a = operand(s.batch, s.m, s.k, dtype, false, gen);
            const Tensor b = operand(s.batch, s.k, s.n, dtype, true, gen);
            const Tensor bias = rand({s.n}, kF32, kCPU, &gen).to(dtype);
            kernels::GemmEpilogue epilogue;
            epilogue.bias = bias;
            epilogue.activation = activation;
            const Tensor out = empty({s.batch, s.m, s.n}, dtype, kCPU);
            if (keep_pre) epilogue.pre_activation = empty({s.batch, s.m, s.n}, dtype, kCPU);
            kernels::bmm(a, b, out, epilogue);
            const double tolerance = dtype == kF32 ? 1e-5 : 8e-3;
            CHECK(relative_error(out, reference(a, b, bias, activation, false)) < tolerance);
            if (keep_pre)
              CHECK(relative_error(epilogue.pre_activation, reference(a, b, bias, activation, true)) < tolerance);
          }
        }
      }
    }
  }
}

TEST_CASE("CPU GEMM: a bf16 product is rounded once from its f32 sum, like Eigen's (double-rounding bug)",
          "[kernels][gemm][cpu]") {
  if (!kernels::onednn_built()) return;  // this build has no oneDNN: nothing to compare
  Generator gen(14);
  const Tensor a = operand(1, 64, 256, kBF16, false, gen);
  const Tensor b = operand(1, 256, 64, kBF16, false, gen);
  const Tensor eigen = empty({1, 64, 64}, kBF16, kCPU), onednn = empty({1, 64, 64}, kBF16, kCPU);
  {
    const UseLibrary use(CpuGemmLibrary::Eigen);
    kernels::bmm(a, b, eigen);
  }
  {
    const UseLibrary use(CpuGemmLibrary::OneDnn);
    kernels::bmm(a, b, onednn);
  }
  // Both sum exactly-representable bf16 products in f32 (in different
  // orders) and round once: they agree to within one bf16 step of the output.
  const std::vector<double> e = as_f64(eigen), o = as_f64(onednn);
  const std::vector<double> exact = reference(a, b, Tensor(), GemmActivation::None, false);
  int differ = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    const double step = std::ldexp(1.0, std::ilogb(std::abs(exact[i])) - 7);  // one bf16 ulp at this magnitude
    CHECK(std::abs(o[i] - exact[i]) <= step);
    differ += e[i] != o[i];
  }
  CHECK(differ <= static_cast<int>(e.size()) / 20);  // most outputs are the same bf16 value
}

TEST_CASE("MT_CPU_GEMM=onednn refuses a product oneDNN does not take instead of falling back silently",
          "[kernels][gemm][cpu]") {
  if (!kernels::onednn_built()) return;  // this build has no oneDNN: nothing to compare
  const UseLibrary use(CpuGemmLibrary::OneDnn);
  Generator gen(15);
  const Tensor a = operand(1, 8, 8, kF32, false, gen), b = operand(1, 8, 8, kBF16, false, gen);  // mixed dtypes
  const Tensor out = empty({1, 8, 8}, kF32, kCPU);
  CHECK_THROWS_WITH(kernels::bmm(a, b, out), Catch::Contains("oneDNN does not take"));
  CHECK_THAT(kernels::cpu_backend_description(), Catch::Contains("oneDNN"));
}

// f16 operands are widened exactly to the f32 product (onednn::compute_dtype):
// bit for bit the f32 GEMM of the same values rounded once, a column-major
// operand and the GELU epilogue (the unfused path) included. Catches f16
// bits handed to an f32 primitive, and a product rounded before its epilogue.
TEST_CASE("MT_CPU_GEMM=onednn multiplies f16 as the f32 product of the same values, rounded once",
          "[kernels][gemm][cpu]") {
  if (!kernels::onednn_built()) return;  // this build has no oneDNN: nothing to compare
  const UseLibrary use(CpuGemmLibrary::OneDnn);
  Generator gen(17);
  for (const GemmActivation activation : {GemmActivation::None, GemmActivation::GeluTanh}) {
    const Tensor a = operand(2, 19, 33, kF16, false, gen), b = operand(2, 33, 21, kF16, true, gen);
    kernels::GemmEpilogue epilogue;
    epilogue.activation = activation;
    const Tensor out16 = empty({2, 19, 21}, kF16, kCPU), out32 = empty({2, 19, 21}, kF32, kCPU);
    kernels::bmm(a, b, out16, epilogue);
    kernels::bmm(a.to(kF32), b.to(kF32), out32, epilogue);
    CHECK(out16.to_vector() == out32.to(kF16).to_vector());
  }
}

TEST_CASE("CPU GEMM: a NaN product stays NaN through the ReLU epilogue, as in PyTorch (oneDNN post-op bug)",
          "[kernels][gemm][cpu]") {
  for (const CpuGemmLibrary library : test::cpu_libraries()) {
    const UseLibrary use(library);
    for (const DType dtype : {kF32, kBF16}) {
      for (const bool keep_pre : {false, true}) {
        INFO(test::library_name(library) << " " << dtype_name(dtype) << " pre-activation kept " << keep_pre);
        Generator gen(16);
        Tensor a = operand(1, 4, 8, kF32, false, gen);
        static_cast<float*>(a.data_ptr())[0] = std::nanf("");  // row 0 of the product is NaN
        a = a.to(dtype);
        const Tensor b = operand(1, 8, 5, dtype, false, gen);
        kernels::GemmEpilogue epilogue;
        epilogue.activation = GemmActivation::Relu;
        if (keep_pre) epilogue.pre_activation = empty({1, 4, 5}, dtype, kCPU);
        const Tensor out = empty({1, 4, 5}, dtype, kCPU);
        kernels::bmm(a, b, out, epilogue);
        const std::vector<double> y = as_f64(out);
        for (int c = 0; c < 5; ++c) CHECK(std::isnan(y[c]));
        if (keep_pre) {
          const std::vector<double> pre = as_f64(epilogue.pre_activation);
          for (int c = 0; c < 5; ++c) CHECK(std::isnan(pre[c]));
          for (size_t i = 5; i < y.size(); ++i) CHECK(y[i] == std::max(pre[i], 0.0));
        }
      }
    }
  }
}
