// The INT8 Linear (autograd/int8.h: quantize the input, u8 x s8 GEMM, the
// epilogue) against the f32 and bf16 Linears of the same shape, side by side
// in one run on the CPU, and the input quantization alone.
//
//   cpu_int8_linear_bench [--min-ms 500]
//
// Shapes: the mlp's layers at an evaluation batch, and a GPT-2 small block's
// projections at 2048 tokens. Runs on mt::num_threads() threads
// (MT_NUM_THREADS).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "autograd/int8.h"
#include "bench/cpu_timing.h"
#include "core/threads.h"
#include "mixtape.h"

int main(int argc, char** argv) {
  CLI::App app{"INT8 vs f32 and bf16 Linear layers on the CPU"};
  double min_ms = 500;
  app.add_option("--min-ms", min_ms, "time each side for at least this long");
  CLI11_PARSE(app, argc, argv);
  using namespace mt;
  struct Shape3 {
    int64_t m, k, n;
  };
  const Shape3 shapes[] = {
      {10000, 784, 256}, {10000, 256, 128}, {2048, 768, 2304}, {2048, 768, 3072}, {2048, 3072, 768}};
  std::printf("Linear y = x W^T + b on the CPU, %d threads, ms per call (GOP/s)\n", num_threads());
  std::printf("%-20s %18s %18s %18s %14s\n", "M x K -> N", "f32", "bf16", "int8 (W8A8)", "quantize x");
  const NoGradGuard no_grad;
  for (const Shape3 s : shapes) {
    const Tensor x = randn({s.m, s.k}), w = randn({s.n, s.k}), b = randn({s.n});
    const Tensor xb = x.to(kBF16), wb = w.to(kBF16), bb = b.to(kBF16);
    const int8::Int8Tensor wq = int8::quantize_per_channel_symmetric(w);
    const Tensor scale = scalar_tensor(4.0 / 127), zero_point = scalar_tensor(128, kI32);
    const double f32 = bench::time_ms([&] { linear(x, w, b); }, min_ms);
    const double bf16 = bench::time_ms([&] { linear(xb, wb, bb); }, min_ms);
    const double i8 = bench::time_ms([&] { int8::linear(x, wq, {scale, zero_point, Tensor()}, b); }, min_ms);
    const double quantize = bench::time_ms([&] { int8::quantize(x, scale, zero_point, -1, kU8); }, min_ms);
    const double ops = 2.0 * static_cast<double>(s.m * s.k * s.n);
    auto cell = [&](double ms) { return fmt::format("{:.3f} ({:.0f})", ms, ops / ms / 1e6); };
    std::printf("%-20s %18s %18s %18s %14.3f\n", fmt::format("{} x {} -> {}", s.m, s.k, s.n).c_str(), cell(f32).c_str(),
                cell(bf16).c_str(), cell(i8).c_str(), quantize);
  }
  return 0;
}
