// The `mixtape` command line. Until the nn/CLI issue lands it offers `info`
// and `demo`: a small MLP written with mixtape's ops and autograd, trained
// with plain SGD on a synthetic classification task on the CPU.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "mixtape.h"
#if defined(MT_WITH_CUDA)
#include "kernels/cuda/device_info.h"
#endif

namespace {

int run_info() {
  std::printf("mixtape %s\n", "0.1.0");
  std::printf("cpu: available\n");
#if defined(MT_WITH_CUDA)
  const auto devices = mt::cuda::query_devices();
  if (devices.count == 0) {
    std::printf("cuda: built, %s\n", devices.error.empty() ? "no devices" : devices.error.c_str());
  } else {
    for (const auto& name : devices.names) std::printf("cuda: %s\n", name.c_str());
  }
#else
  std::printf("cuda: not built\n");
#endif
  return 0;
}

// Two interleaved spirals-like blobs in 2-D: class = which side of a curved boundary.
struct Dataset {
  mt::Tensor x, y;
};

Dataset make_dataset(int64_t n, uint64_t seed) {
  mt::Generator gen(seed);
  mt::Tensor x = mt::mul(mt::sub(mt::rand({n, 2}, mt::kF32, mt::kCPU, &gen), 0.5), 4.0);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  const auto values = x.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const double a = values[static_cast<size_t>(2 * i)], b = values[static_cast<size_t>(2 * i + 1)];
    const double r = std::sqrt(a * a + b * b);
    labels[static_cast<size_t>(i)] = (std::sin(2.0 * r) + 0.5 * a > 0) ? 1 : (b > 0 ? 2 : 0);
  }
  return {x, mt::from_vector(labels, {n})};
}

int run_demo(int steps, double lr, uint64_t seed) {
  mt::manual_seed(seed);
  const Dataset train = make_dataset(2048, seed);
  const Dataset test = make_dataset(1024, seed + 1);
  auto param = [](mt::Shape shape, double fan_in) {
    const double bound = 1.0 / std::sqrt(fan_in);
    return mt::uniform(shape, -bound, bound).requires_grad_();
  };
  std::vector<mt::Tensor> params = {param({64, 2}, 2), param({64}, 2), param({64, 64}, 64), param({64}, 64),
                                    param({3, 64}, 64), param({3}, 64)};
  auto forward = [&](const mt::Tensor& x) {
    mt::Tensor h = mt::relu(mt::linear(x, params[0], params[1]));
    h = mt::relu(mt::linear(h, params[2], params[3]));
    return mt::linear(h, params[4], params[5]);
  };
  std::printf("demo: 2-64-64-3 MLP, SGD lr=%.3g, %d steps, batch 128, synthetic 3-class data\n", lr, steps);
  const auto start = std::chrono::steady_clock::now();
  const int64_t batch = 128;
  for (int step = 1; step <= steps; ++step) {
    const int64_t begin = (static_cast<int64_t>(step) * batch) % (train.x.size(0) - batch);
    const mt::Tensor loss =
        mt::cross_entropy(forward(train.x.narrow(0, begin, batch)), train.y.narrow(0, begin, batch));
    for (auto& p : params) p.set_grad(mt::Tensor());
    loss.backward();
    {
      mt::NoGradGuard no_grad;
      for (auto& p : params) {
        const mt::Tensor updated = mt::sub(p, mt::mul(p.grad(), lr));
        mt::copy_(p, updated);
      }
    }
    if (step == 1 || step % 100 == 0) std::printf("step %4d  loss %.4f\n", step, loss.item<double>());
  }
  mt::NoGradGuard no_grad;
  const mt::Tensor predicted = mt::argmax(forward(test.x), 1);
  const double accuracy = mt::mean(mt::eq(predicted, test.y).to(mt::kF32)).item<double>();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("test accuracy %.2f%%  (%.1f s)\n", 100.0 * accuracy, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mixtape: native mixed-precision training in C++/CUDA"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Show devices and build information");
  int steps = 600;
  double lr = 0.2;
  uint64_t seed = 0;
  auto* demo = app.add_subcommand("demo", "Train a small MLP on synthetic data on the CPU");
  demo->add_option("--steps", steps, "SGD steps")->check(CLI::PositiveNumber);
  demo->add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  demo->add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return run_info();
    if (*demo) return run_demo(steps, lr, seed);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
