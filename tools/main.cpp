// The `mixtape` command line. Until the nn/CLI issue lands it offers `info`
// and `demo`: a small MLP written with mixtape's ops and autograd, trained
// with plain SGD on a synthetic classification task on the CPU.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "mixtape.h"
#include "models/demo_mlp.h"
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

int run_demo(const mt::models::DemoOptions& options) {
  std::printf("demo: 2-%lld-%lld-3 MLP, SGD lr=%.3g, %d steps of batch %lld on a synthetic 3-class task (CPU)\n",
              static_cast<long long>(options.hidden), static_cast<long long>(options.hidden), options.lr,
              options.steps, static_cast<long long>(options.batch));
  const auto start = std::chrono::steady_clock::now();
  const auto result = mt::models::train_demo_mlp(options, [](int step, double loss) {
    if (step == 1 || step % 100 == 0) std::printf("step %4d  loss %.4f\n", step, loss);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("test accuracy %.2f%%  (%.1f s)\n", 100.0 * result.test_accuracy, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mixtape: native mixed-precision training in C++/CUDA"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Show devices and build information");
  mt::models::DemoOptions demo_options;
  auto* demo = app.add_subcommand("demo", "Train a small MLP on synthetic data on the CPU");
  demo->add_option("--steps", demo_options.steps, "SGD steps")->check(CLI::PositiveNumber);
  demo->add_option("--lr", demo_options.lr, "learning rate")->check(CLI::PositiveNumber);
  demo->add_option("--seed", demo_options.seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return run_info();
    if (*demo) return run_demo(demo_options);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
