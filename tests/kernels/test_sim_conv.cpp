// conv2d, max/avg/adaptive pooling and batch norm CUDA kernels
// (kernels/{conv,pool,batch_norm}/cuda.cu) run on the `sim` device through
// the autograd API and compared with the CPU backend: forward and backward,
// F32 / F16 / BF16 (and F64), strides, padding, dilation and groups; then two
// AdamW steps of the `cnn` reference model on both devices.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/batch_norm/api.h"
#include "kernels/conv/api.h"
#include "kernels/pool/api.h"
#include "mixtape.h"
#include "models/registry.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;
using mt::kernels::KernelDType;

namespace {

using test::check_matches;

// Inputs in [-1, 1] unless a test asks otherwise.
Tensor random_cpu(const Shape& shape, DType dtype, unsigned seed, double lo = -1, double hi = 1) {
  return test::random_cpu(shape, dtype, seed, lo, hi);
}

// Both devices compute in f32 and round once (dx of conv twice in f16/bf16 on
// sim), so they differ by a couple of ulps of the stored dtype at most.
double tolerance(DType t) {
  switch (t) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::F16: return 4e-3;
    case DType::BF16: return 3e-2;
    default: return 0;
  }
}

struct Pair {
  Tensor cpu, sim;
};
Pair leaf_pair(const Tensor& values) {
  Pair p{values.clone().detach(), values.to(test::kCudaPath).detach()};
  p.cpu.requires_grad_();
  p.sim.requires_grad_();
  return p;
}

// Runs fn on both devices, compares the outputs, backpropagates sum(y * r)
// for a random r and compares every input's gradient.
template <typename Fn>
void check_op(const std::vector<Tensor>& inputs, Fn&& fn, double tol, const std::string& what) {
  std::vector<Tensor> cpu_in, sim_in;
  std::vector<Pair> pairs;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      cpu_in.emplace_back();
      sim_in.emplace_back();
      pairs.push_back({});
      continue;
    }
    pairs.push_back(leaf_pair(t));
    cpu_in.push_back(pairs.back().cpu);
    sim_in.push_back(pairs.back().sim);
  }
  const Tensor y_cpu = fn(cpu_in), y_sim = fn(sim_in);
  check_matches(y_sim, y_cpu, tol, what + " forward");
  const Tensor r = random_cpu(y_cpu.sizes(), y_cpu.dtype(), 99);
  sum(mul(y_cpu, r)).backward();
  sum(mul(y_sim, r.to(test::kCudaPath))).backward();
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (!pairs[i].cpu.defined()) continue;
    check_matches(pairs[i].sim.grad(), pairs[i].cpu.grad(), 2 * tol, what + " grad of input " + std::to_string(i));
  }
}

const DType kDTypes[] = {kF32, kF16, kBF16, kF64};

}  // namespace

TEST_CASE("sim conv2d forward and backward match the CPU", "[sim][conv]") {
  struct Case {
    int64_t kernel, stride, padding, dilation, groups;
    bool bias;
  };
  const Case cases[] = {
      {3, 1, 0, 1, 1, true}, {3, 2, 1, 1, 1, true},  {3, 1, 1, 2, 1, true},
      {3, 2, 1, 2, 3, true}, {3, 1, 1, 1, 3, false}, {1, 1, 0, 1, 1, true},
  };
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      const std::string what = fmt::format("{} k{} s{} p{} d{} g{} bias={}", dtype_name(dtype), c.kernel, c.stride,
                                           c.padding, c.dilation, c.groups, c.bias);
      const Tensor x = random_cpu({2, 3, 6, 6}, dtype, 1);
      const Tensor w = random_cpu({6, 3 / c.groups, c.kernel, c.kernel}, dtype, 2, -0.5, 0.5);
      const Tensor b = c.bias ? random_cpu({6}, dtype, 3) : Tensor();
      check_op(
          {x, w, b},
          [&](const std::vector<Tensor>& in) {
            return conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups);
          },
          tolerance(dtype), what);
    }
  }
}

TEST_CASE("sim conv2d with rectangular kernels and a non-square input", "[sim][conv]") {
  const Tensor x = random_cpu({3, 4, 7, 5}, kF32, 4);
  const Tensor w = random_cpu({8, 2, 2, 3}, kF32, 5);
  const Tensor b = random_cpu({8}, kF32, 6);
  check_op(
      {x, w, b},
      [](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], in[2], Size2(2, 1), Size2(1, 0), Size2(1, 2), 2);
      },
      tolerance(kF32), "rectangular");
}

// Catches: split-K pieces that overlap or leave samples out (piece offsets
// into dy^T and col), partials written over each other (the batch stride of
// the f32 partials, the group offset), partials rounded to the dtype before
// the sum, or the sum skipped.
TEST_CASE("sim conv2d splits a long weight-gradient reduction over samples", "[sim][conv]") {
  for (const int64_t groups : {int64_t{1}, int64_t{2}}) {
    kernels::ConvShape shape;
    shape.batch = 8, shape.in_channels = 4, shape.in_h = shape.in_w = 16;
    shape.out_channels = 6, shape.kernel_h = shape.kernel_w = 3, shape.pad_h = shape.pad_w = 1;
    shape.groups = groups, shape.out_h = shape.out_w = 16;
    for (DType dtype : {kF32, kF16, kBF16}) {
      const KernelDType kd = dtype == kF32 ? KernelDType::F32 : dtype == kF16 ? KernelDType::F16 : KernelDType::BF16;
      REQUIRE(kernels::conv2d_weight_grad_splits(kd, shape) == 2);  // N*L = 2048: two pieces of 1024
      const Tensor x = random_cpu({8, 4, 16, 16}, dtype, 11);
      const Tensor w = random_cpu({6, 4 / groups, 3, 3}, dtype, 12, -0.5, 0.5);
      check_op(
          {x, w, Tensor()}, [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], 1, 1, 1, groups); },
          tolerance(dtype), fmt::format("{} groups={}", dtype_name(dtype), groups));
    }
  }
  kernels::ConvShape f64 = {};
  f64.batch = 8, f64.in_channels = 4, f64.out_channels = 6, f64.kernel_h = f64.kernel_w = 3, f64.out_h = f64.out_w = 16;
  CHECK(kernels::conv2d_weight_grad_splits(KernelDType::F64, f64) == 1);  // f32 partials would lose f64's precision
}

TEST_CASE("sim max/avg/adaptive pooling forward and backward match the CPU", "[sim][pool]") {
  for (DType dtype : kDTypes) {
    const std::string name(dtype_name(dtype));
    const double tol = tolerance(dtype);
    const Tensor x = random_cpu({2, 3, 6, 6}, dtype, 7);
    const Tensor odd = random_cpu({2, 3, 5, 7}, dtype, 8);
    check_op(
        {x}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 2, 2); }, tol, name + " max k2 s2");
    check_op(
        {x}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 2, 1); }, tol, name + " max k3 s2 p1");
    // Overlapping windows: one input can be the max of several outputs.
    check_op(
        {odd}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 1, 1); }, tol, name + " max k3 s1");
    for (bool include_pad : {true, false}) {
      check_op(
          {x}, [&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], 3, 2, 1, include_pad); }, tol,
          name + " avg k3 s2 p1 include_pad=" + std::to_string(include_pad));
      check_op(
          {odd},
          [&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], Size2(2, 3), 1, Size2(1, 1), include_pad); },
          tol, name + " avg k2x3 s1 p1 include_pad=" + std::to_string(include_pad));
    }
    check_op(
        {x}, [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], Size2(4, 3)); }, tol,
        name + " adaptive 6x6->4x3");
    check_op(
        {odd}, [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], 1); }, tol,
        name + " adaptive 5x7->1x1");
    check_op(
        {odd}, [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], Size2(8, 3)); }, tol,
        name + " adaptive 5x7->8x3 (upsampling rows)");
  }
}

TEST_CASE("sim max_pool2d writes the same argmax indices as the CPU and propagates NaN", "[sim][pool]") {
  std::vector<double> v(2 * 4 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 3);  // ties everywhere
  v[5] = NAN;
  const Tensor x = from_vector(v, {2, 4, 4}, kF32);
  const Tensor y_cpu = max_pool2d(x, 2, 2), y_sim = max_pool2d(x.to(test::kCudaPath), 2, 2);
  check_matches(y_sim, y_cpu, 0, "max with ties and a NaN");
}

// Catches (besides the statistics themselves): a channel's statistics split
// across blocks (3 x 40 x 40 per channel: two slices) with a slice left out
// or counted twice, or the slices of one channel read as another's.
TEST_CASE("sim batch_norm training and eval match the CPU", "[sim][batch_norm]") {
  REQUIRE(kernels::batch_norm_slices(3, 3 * 40 * 40) == 2);
  for (DType dtype : kDTypes) {
    for (bool affine : {true, false}) {
      for (const Shape& shape : {Shape{2, 3, 6, 6}, Shape{8, 3}, Shape{3, 3, 40, 40}}) {
        const std::string what = fmt::format("{} affine={} shape {}", dtype_name(dtype), affine, shape.size());
        const double tol = tolerance(dtype);
        const Tensor x = random_cpu(shape, dtype, 9, -2, 3);
        const Tensor w = affine ? random_cpu({3}, dtype, 10, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? random_cpu({3}, dtype, 11) : Tensor();
        const DType stats = dtype == kF64 ? kF64 : kF32;
        const Tensor rm_cpu = random_cpu({3}, stats, 12), rv_cpu = random_cpu({3}, stats, 13, 0.5, 2);
        const Tensor rm_sim = rm_cpu.to(test::kCudaPath), rv_sim = rv_cpu.to(test::kCudaPath);
        const Tensor rm0 = rm_cpu.clone(), rv0 = rv_cpu.clone();
        for (bool training : {true, false}) {
          // Eval uses (and does not touch) the running stats; training updates them in place.
          const Tensor& rm = training ? rm_cpu : rm0;
          const Tensor& rv = training ? rv_cpu : rv0;
          const Tensor rms = training ? rm_sim : rm0.to(test::kCudaPath),
                       rvs = training ? rv_sim : rv0.to(test::kCudaPath);
          check_op(
              {x, w, b},
              [&](const std::vector<Tensor>& in) {
                const bool on_sim = in[0].device() == test::kCudaPath;
                return batch_norm(in[0], on_sim ? rms : rm, on_sim ? rvs : rv, in[1], in[2], training, 0.1, 1e-5);
              },
              tol, what + (training ? " training" : " eval"));
          if (training) {
            check_matches(rm_sim, rm_cpu, tolerance(stats), what + " running_mean");
            check_matches(rv_sim, rv_cpu, tolerance(stats), what + " running_var");
          } else {
            check_matches(rms, rm0, 0, what + " running_mean untouched in eval");
          }
        }
      }
    }
  }
}

TEST_CASE("two AdamW steps of the cnn model give the same losses on sim and CPU", "[sim][conv][model]") {
  manual_seed(1234);
  auto cpu_model = models::make_model("cnn");
  manual_seed(1234);
  auto sim_model = models::make_model("cnn");
  sim_model->to(test::kCudaPath);
  const Tensor images = random_cpu({4, 1, 28, 28}, kF32, 21, 0, 1);
  const Tensor labels = from_vector(std::vector<int64_t>{3, 1, 4, 1}, {4});
  optim::AdamW cpu_opt(cpu_model->parameters(), optim::AdamWOptions{1e-3});
  optim::AdamW sim_opt(sim_model->parameters(), optim::AdamWOptions{1e-3});
  const Tensor images_sim = images.to(test::kCudaPath), labels_sim = labels.to(test::kCudaPath);
  for (int step = 0; step < 3; ++step) {
    const Tensor loss_cpu = cross_entropy((*cpu_model)(images), labels);
    const Tensor loss_sim = cross_entropy((*sim_model)(images_sim), labels_sim);
    INFO("step " << step);
    const double lc = loss_cpu.item<double>(), ls = loss_sim.to(kCPU).item<double>();
    CHECK(std::abs(lc - ls) <= 1e-4 * (1 + std::abs(lc)));
    if (step == 0) {
      // The first forward's batch-norm running-stat updates agree. (Later ones
      // need not to f32 precision: the conv biases feed a batch norm, so their
      // true gradient is 0 and AdamW turns each device's rounding noise into a
      // +-lr step of its own sign.)
      const auto cpu_buffers = cpu_model->named_buffers(), sim_buffers = sim_model->named_buffers();
      REQUIRE(cpu_buffers.size() == sim_buffers.size());
      for (size_t i = 0; i < cpu_buffers.size(); ++i) {
        if (!is_floating(cpu_buffers[i].second.dtype())) continue;
        check_matches(sim_buffers[i].second, cpu_buffers[i].second, 1e-5, cpu_buffers[i].first);
      }
    }
    if (step == 2) break;  // the third forward checks the second update
    cpu_opt.zero_grad();
    sim_opt.zero_grad();
    loss_cpu.backward();
    loss_sim.backward();
    cpu_opt.step();
    sim_opt.step();
  }
}

TEST_CASE("the resnet model's forward and backward match the CPU on sim", "[sim][conv][model]") {
  // Stride-2 convs, 1x1 shortcuts, batch norm and global average pooling.
  manual_seed(99);
  auto cpu_model = models::make_model("resnet");
  manual_seed(99);
  auto sim_model = models::make_model("resnet");
  sim_model->to(test::kCudaPath);
  const Tensor images = random_cpu({2, 1, 28, 28}, kF32, 31, 0, 1);
  const Tensor labels = from_vector(std::vector<int64_t>{7, 2}, {2});
  const Tensor loss_cpu = cross_entropy((*cpu_model)(images), labels);
  const Tensor loss_sim = cross_entropy((*sim_model)(images.to(test::kCudaPath)), labels.to(test::kCudaPath));
  check_matches(loss_sim, loss_cpu, 1e-5, "loss");
  loss_cpu.backward();
  loss_sim.backward();
  const auto cpu_params = cpu_model->named_parameters(), sim_params = sim_model->named_parameters();
  REQUIRE(cpu_params.size() == sim_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    // Conv biases feeding a batch norm have a true gradient of 0: compare on the scale of the largest gradient.
    const Tensor& g_cpu = cpu_params[i].second.grad();
    const Tensor& g_sim = sim_params[i].second.grad();
    REQUIRE(g_sim.defined());
    double scale = 0;
    for (double v : g_cpu.to_vector()) scale = std::max(scale, std::abs(v));
    check_matches(div(g_sim, scale + 1e-30), div(g_cpu, scale + 1e-30), 1e-4, cpu_params[i].first);
  }
}

TEST_CASE("the cnn model under f16/bf16 autocast agrees on sim and CPU", "[sim][conv][model][amp]") {
  // Convolutions run in the low-precision dtype (the Tensor Core GEMM on sim),
  // batch norm in f32, by the autocast policy. The own conv kernels mirror the
  // CPU's arithmetic, so every gradient must agree closely. cuDNN (GPU, auto)
  // sums in other orders and rounds its f16 partial results differently; with
  // a batch of 2, the batch norms' mean subtraction magnifies that in the
  // gradients below them, so under cuDNN the forward loss and fc1's gradient
  // (downstream of the convolutions' forward only) are compared here, and
  // cuDNN's own gradients against an f64 reference in test_cudnn_conv.cpp.
  for (const char* conv_backend : {"own", "auto"}) {
    for (DType dtype : {kF16, kBF16}) {
      INFO(dtype_name(dtype) << " MT_CONV=" << conv_backend);
      const test::ScopedEnv env("MT_CONV", conv_backend);
      const bool own_conv = std::string(conv_backend) == "own";
      if (!own_conv && test::kCudaPath.is_sim()) continue;  // no cuDNN on sim: auto is own again
      manual_seed(7);
      auto cpu_model = models::make_model("cnn");
      manual_seed(7);
      auto sim_model = models::make_model("cnn");
      sim_model->to(test::kCudaPath);
      const Tensor images = random_cpu({2, 1, 28, 28}, kF32, 41, 0, 1);
      const Tensor labels = from_vector(std::vector<int64_t>{0, 9}, {2});
      Tensor loss_cpu, loss_sim;
      {
        amp::Autocast ac(kCPU, dtype);
        loss_cpu = cross_entropy((*cpu_model)(images), labels);
      }
      {
        amp::Autocast ac(test::kCudaPath, dtype);
        loss_sim = cross_entropy((*sim_model)(images.to(test::kCudaPath)), labels.to(test::kCudaPath));
      }
      const double tol = dtype == kF16 ? 1e-2 : 5e-2;
      check_matches(loss_sim, loss_cpu, tol, "loss");
      loss_cpu.backward();
      loss_sim.backward();
      for (const char* name : {"conv1.weight", "conv2.weight", "fc1.weight"}) {
        if (!own_conv && std::string(name) != "fc1.weight") continue;
        Tensor g_cpu, g_sim;
        for (const auto& [n, p] : cpu_model->named_parameters()) {
          if (n == name) g_cpu = p.grad();
        }
        for (const auto& [n, p] : sim_model->named_parameters()) {
          if (n == name) g_sim = p.grad();
        }
        REQUIRE(g_cpu.defined());
        REQUIRE(g_sim.defined());
        double scale = 0;
        for (double v : g_cpu.to_vector()) scale = std::max(scale, std::abs(v));
        check_matches(div(g_sim, scale), div(g_cpu, scale), 3 * tol, name);
      }
    }
  }
}
