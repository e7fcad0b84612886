// The CPU's fused AdamW step (kernels/optim/cpu.cpp) with each state dtype,
// side by side in one run: nanoseconds per parameter and the bytes of state
// per parameter.
//
//   cpu_optimizer_bench [--params 16777216] [--tensors 16] [--min-ms 1000]
//
// The parameters are f32, split into equal tensors, with random gradients;
// every state dtype steps the same ones. Runs on mt::num_threads() threads
// (MT_NUM_THREADS).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "bench/cpu_timing.h"
#include "core/threads.h"
#include "mixtape.h"

int main(int argc, char** argv) {
  CLI::App app{"AdamW steps on the CPU per optimizer state dtype"};
  int64_t params = 16 << 20, tensors = 16;
  double min_ms = 1000;
  app.add_option("--params", params, "parameters in all")->check(CLI::PositiveNumber);
  app.add_option("--tensors", tensors, "tensors they are split into")->check(CLI::PositiveNumber);
  app.add_option("--min-ms", min_ms, "time each side for at least this long");
  CLI11_PARSE(app, argc, argv);
  using namespace mt;
  std::printf("AdamW on the CPU, %lld f32 parameters in %lld tensors, %d threads\n",
              static_cast<long long>(params), static_cast<long long>(tensors), num_threads());
  std::printf("%-6s %12s %14s\n", "state", "ns/param", "state B/param");
  for (const auto dtype : {optim::StateDtype::F32, optim::StateDtype::BF16, optim::StateDtype::Int8}) {
    std::vector<Tensor> weights;
    for (int64_t t = 0; t < tensors; ++t) {
      Tensor w = randn({params / tensors}, kF32).requires_grad_();
      w.set_grad(randn({params / tensors}, kF32));
      weights.push_back(w);
    }
    optim::AdamW opt(weights, {.lr = 1e-3}, {.state_dtype = dtype});
    const double ms = bench::time_ms([&] { opt.step(); }, min_ms);
    int64_t state_bytes = 0;
    for (const auto& [key, value] : opt.state_dict()) {
      if (key.rfind("state.", 0) == 0) state_bytes += value.numel() * static_cast<int64_t>(element_size(value.dtype()));
    }
    std::printf("%-6s %12.3f %14.3f\n", optim::state_dtype_name(dtype), ms * 1e6 / static_cast<double>(params),
                static_cast<double>(state_bytes) / static_cast<double>(params));
  }
  return 0;
}
