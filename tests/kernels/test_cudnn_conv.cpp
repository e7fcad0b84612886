// The two back ends of the CUDA-path conv2d (kernels/conv/conv.h): cuDNN
// (kernels/conv/cudnn.cu) and the own im2col + GEMM kernels
// (kernels/conv/cuda.cu), chosen by MT_CONV=auto|own|cudnn.
//
// On a GPU built with cuDNN, every case runs under MT_CONV=cudnn and
// MT_CONV=own, forward and backward in f32 / f16 / bf16, and both must agree
// with each other and with an f64 CPU reference computed from the same
// (rounded) inputs. Without a GPU the cases run on the sim device, where
// MT_CONV=cudnn falls back to the own kernels: the test then checks the
// fallback and the selection rules, never cuDNN.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kernels/conv/conv.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;

namespace {

using kernels::ConvBackend;

// The back end MT_CONV=`value` gives on the test device.
ConvBackend backend_under(const char* value) {
  const test::ScopedEnv env("MT_CONV", value);
  if (test::kCudaPath.is_sim()) return mt::sim::conv2d_backend(ConvBackend::Auto);
#if defined(MT_WITH_CUDA_KERNELS)
  return mt::cuda::conv2d_backend(ConvBackend::Auto);
#else
  return ConvBackend::Own;
#endif
}

// Whether this build and machine run cuDNN at all (a GPU, cuDNN compiled in).
bool cudnn_runs() { return backend_under("cudnn") == ConvBackend::Cudnn; }

struct ConvCase {
  Shape x, w;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::string describe(const ConvCase& c) {
  return fmt::format("x [{}] w [{}] stride {}x{} padding {}x{} dilation {}x{} groups {} bias={}", fmt::join(c.x, ", "),
                     fmt::join(c.w, ", "), c.stride.h, c.stride.w, c.padding.h, c.padding.w, c.dilation.h, c.dilation.w,
                     c.groups, c.bias);
}

// One case's inputs, already rounded to the dtype under test.
struct Inputs {
  Tensor x, w, b, r;  // r: the weights of the loss sum(y * r)
};

Inputs make_inputs(const ConvCase& c, DType dtype) {
  Inputs in;
  in.x = test::random_cpu(c.x, dtype, 11);
  in.w = test::random_cpu(c.w, dtype, 12, -0.5, 0.5);
  if (c.bias) in.b = test::random_cpu({c.w[0]}, dtype, 13);
  const Tensor y = conv2d(in.x.to(kF64), in.w.to(kF64), Tensor(), c.stride, c.padding, c.dilation, c.groups);
  in.r = test::random_cpu(y.sizes(), dtype, 14, -1, 1);
  return in;
}

// y and the gradients of sum(y * r), read back as f64 CPU tensors.
struct Outputs {
  Tensor y, dx, dw, db;
};

Outputs run_conv(const ConvCase& c, const Inputs& in, Device device, DType dtype) {
  const auto leaf = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor l = t.to(dtype).to(device).detach();
    l.requires_grad_();
    return l;
  };
  const Tensor x = leaf(in.x), w = leaf(in.w), b = leaf(in.b);
  const Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
  sum(mul(y, in.r.to(dtype).to(device))).backward();
  const auto back = [](const Tensor& t) { return t.defined() ? t.to(kCPU).to(kF64) : Tensor(); };
  return {back(y), back(x.grad()), back(w.grad()), b.defined() ? back(b.grad()) : Tensor()};
}

double tolerance(DType t) { return t == kF32 ? 1e-5 : t == kF16 ? 4e-3 : 3e-2; }

// |got - want| <= tol * (1 + max |want|) everywhere (normwise: a sum of many
// products carries rounding error on the scale of its largest partial sums,
// not of its own value, which may nearly cancel); names the first bad element.
void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= tol * (1 + scale))) {
      FAIL_CHECK("element " << i << ": " << g[i] << " vs " << w[i] << " (tolerance " << tol << ")");
      return;
    }
  }
}

void check_outputs(const Outputs& got, const Outputs& want, double tol, const std::string& what) {
  check_close(got.y, want.y, tol, what + " forward");
  check_close(got.dx, want.dx, 2 * tol, what + " dx");
  check_close(got.dw, want.dw, 2 * tol, what + " dweight");
  check_close(got.db, want.db, 2 * tol, what + " dbias");
}

std::vector<ConvCase> cases(bool large) {
  std::vector<ConvCase> list = {
      {{2, 4, 9, 9}, {6, 4, 3, 3}, 2, 1, 1, 1, true},                                // stride 2, padding
      {{2, 4, 8, 8}, {4, 4, 3, 3}, 1, 2, 2, 1, false},                               // dilation 2
      {{2, 6, 7, 7}, {6, 2, 3, 3}, 1, 1, 1, 3, true},                                // groups 3
      {{2, 4, 6, 6}, {4, 1, 3, 3}, 2, 1, 1, 4, false},                               // depthwise, stride 2
      {{1, 4, 7, 5}, {8, 2, 2, 3}, Size2(2, 1), Size2(1, 0), Size2(1, 2), 2, true},  // rectangular
      {{3, 5, 4, 4}, {7, 5, 1, 1}, 1, 0, 1, 1, true},                                // 1x1
  };
  // Big enough for cuDNN to choose other algorithms than for the small ones (GPU only: slow on the simulator).
  if (large) list.push_back({{8, 32, 20, 20}, {64, 32, 3, 3}, 1, 1, 1, 1, true});
  return list;
}

}  // namespace

TEST_CASE("conv2d under MT_CONV=cudnn and MT_CONV=own agree with each other and an f64 reference", "[conv][cudnn]") {
  const bool with_cudnn = cudnn_runs();
  if (!with_cudnn) {
    INFO("no cuDNN on " << test::kCudaPath.str() << ": MT_CONV=cudnn runs the own kernels; cuDNN is checked on a GPU");
    CHECK(backend_under("cudnn") == ConvBackend::Own);
  }
  for (const ConvCase& c : cases(with_cudnn)) {
    for (DType dtype : {kF32, kF16, kBF16}) {
      const std::string what = fmt::format("{} {}", dtype_name(dtype), describe(c));
      const Inputs in = make_inputs(c, dtype);
      const Outputs reference = run_conv(c, in, kCPU, kF64);  // f64 on the same rounded inputs
      Outputs cudnn, own;
      {
        const test::ScopedEnv env("MT_CONV", "cudnn");
        cudnn = run_conv(c, in, test::kCudaPath, dtype);
      }
      {
        const test::ScopedEnv env("MT_CONV", "own");
        own = run_conv(c, in, test::kCudaPath, dtype);
      }
      const double tol = tolerance(dtype);
      check_outputs(cudnn, reference, tol, what + " cudnn vs f64 reference");
      check_outputs(own, reference, tol, what + " own vs f64 reference");
      check_outputs(cudnn, own, 2 * tol, what + " cudnn vs own");
    }
  }
}

TEST_CASE("MT_CONV chooses the conv2d back end, and a bad value is a clear error", "[conv][cudnn]") {
  CHECK(mt::sim::conv2d_backend(ConvBackend::Own) == ConvBackend::Own);
  for (const char* value : {"", "auto", "own", "cudnn"}) {
    INFO("MT_CONV=" << value);
    const test::ScopedEnv env("MT_CONV", value);
    CHECK(mt::sim::conv2d_backend(ConvBackend::Auto) == ConvBackend::Own);  // the simulator has no cuDNN
  }
  {
    const test::ScopedEnv env("MT_CONV", "bogus");
    CHECK_THROWS_WITH(mt::sim::conv2d_backend(ConvBackend::Auto), Catch::Contains("MT_CONV"));
    const Tensor x = ones({1, 1, 3, 3}, kF32, test::kCudaPath), w = ones({1, 1, 2, 2}, kF32, test::kCudaPath);
    CHECK_THROWS_AS(conv2d(x, w), Error);
    CHECK_THROWS_WITH(conv2d(x, w), Catch::Contains("MT_CONV='bogus'") && Catch::Contains("conv2d"));
  }
  kernels::ConvShape shape;
  shape.batch = shape.in_channels = shape.in_h = shape.in_w = shape.out_channels = 1;
  shape.kernel_h = shape.kernel_w = shape.out_h = shape.out_w = 1;
  CHECK(kernels::conv2d_cudnn_fits(shape));
  CHECK_THROWS_WITH(mt::sim::conv2d_cudnn_workspace_bytes(kernels::KernelDType::F32, shape, kernels::ConvPass::Forward),
                    Catch::Contains("GPU"));
  shape.batch = 0;  // empty problems always take the own path
  CHECK_FALSE(kernels::conv2d_cudnn_fits(shape));
#if defined(MT_WITH_CUDA_KERNELS) && MT_WITH_CUDNN
  if (test::kCudaPath == kCUDA) {
    const test::ScopedEnv env("MT_CONV", "auto");
    CHECK(mt::cuda::conv2d_backend(ConvBackend::Auto) == ConvBackend::Cudnn);  // auto: cuDNN on a GPU
  }
#endif
}

TEST_CASE("conv2d through cuDNN allocates its workspace, not the own im2col buffers", "[conv][cudnn]") {
  // x [2, 8, 12, 12] with a 5x5 kernel: the own forward's col buffer is
  // 2 * (8*25 + 1) * 12*12 f32 = 226 KiB, 25x the input.
  const ConvCase c{{2, 8, 12, 12}, {8, 8, 5, 5}, 1, 2, 1, 1, true};
  const Tensor x = test::random_cpu(c.x, kF32, 21).to(test::kCudaPath);
  const Tensor w = test::random_cpu(c.w, kF32, 22).to(test::kCudaPath);
  const Tensor b = test::random_cpu({8}, kF32, 23).to(test::kCudaPath);
  const int64_t col_bytes = 2 * (8 * 25 + 1) * 12 * 12 * 4, y_bytes = 2 * 8 * 12 * 12 * 4;
  Allocator& allocator = allocator_for(test::kCudaPath);
  const auto extra_bytes = [&](const char* backend) {
    const test::ScopedEnv env("MT_CONV", backend);
    NoGradGuard no_grad;
    const int64_t before = allocator.stats().current_bytes;
    allocator.reset_peak();
    const Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    return allocator.stats().peak_bytes - before;
  };
  CHECK(extra_bytes("own") >= col_bytes + y_bytes);
  if (!cudnn_runs()) return;  // on the sim device MT_CONV=cudnn is the own path again
#if defined(MT_WITH_CUDA_KERNELS)
  kernels::ConvShape shape;
  shape.batch = 2, shape.in_channels = 8, shape.in_h = shape.in_w = 12, shape.out_channels = 8;
  shape.kernel_h = shape.kernel_w = 5, shape.pad_h = shape.pad_w = 2, shape.out_h = shape.out_w = 12;
  const auto workspace = static_cast<int64_t>(
      mt::cuda::conv2d_cudnn_workspace_bytes(kernels::KernelDType::F32, shape, kernels::ConvPass::Forward));
  INFO("cuDNN forward workspace: " << workspace << " bytes");
  // y and the workspace, each rounded up to the caching allocator's 512 bytes; no col buffer.
  CHECK(extra_bytes("cudnn") <= y_bytes + workspace + 1024);
#endif
}
