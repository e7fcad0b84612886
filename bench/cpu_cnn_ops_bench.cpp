// The cnn's elementwise and row-wise layers on the CPU, one at a time:
// max-pool 2 x 2, training-mode batch norm and ReLU at the two activation
// shapes of `--model cnn` and the third of `--model resnet` ([128, 128, 7,
// 7]: 49-value rows), forward alone and forward + backward, in f32 and bf16.
// What the oneDNN convolutions leave of a cnn or resnet step (their
// own time is oneDNN's); run it before and after changing one of these
// kernels, on an idle machine, MT_NUM_THREADS as the training run has it.
//
//   cpu_cnn_ops_bench [--min-ms 300]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cpu_timing.h"
#include "core/threads.h"
#include "mixtape.h"

using namespace mt;

namespace {

// Milliseconds of op(x) alone (no tape) and of op(x) then its backward.
// The upstream gradient is made once, outside the timing: a single-threaded
// ones_like of a bf16 [128, 32, 28, 28] took 0.91 ms, more than the ReLU's
// whole backward.
template <typename Op>
std::pair<double, double> forward_and_backward(const Tensor& x, Op op, double min_ms) {
  const double forward = bench::time_ms(
      [&] {
        NoGradGuard no_grad;
        op(x);
      },
      min_ms);
  Tensor upstream;
  {
    NoGradGuard no_grad;
    upstream = ones_like(op(x));
  }
  const double both = bench::time_ms(
      [&] {
        x.set_grad(Tensor());  // the backward's own output, not an accumulation into the last one
        op(x).backward(upstream);
      },
      min_ms);
  return {forward, both};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The cnn's pool, batch norm and ReLU on the CPU: ms per call"};
  double min_ms = 300;
  app.add_option("--min-ms", min_ms, "time each measurement for at least this long")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::printf("%d thread(s); ms per call, forward | forward + backward\n\n", num_threads());
  std::printf("| dtype | shape | max_pool2d 2x2 | batch_norm (training) | relu |\n|---|---|---|---|---|\n");
  for (const DType dtype : {kF32, kBF16}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{128, 32, 28, 28}, {128, 64, 14, 14}, {128, 128, 7, 7}}) {
      Tensor x = randn(shape).to(dtype);
      x.requires_grad_(true);
      Tensor weight = ones({shape[1]}), bias = zeros({shape[1]});
      weight.requires_grad_(true);
      bias.requires_grad_(true);
      const Tensor running_mean = zeros({shape[1]}), running_var = ones({shape[1]});
      const auto pool = forward_and_backward(
          x, [](const Tensor& t) { return max_pool2d(t, 2, 2); }, min_ms);
      const auto norm = forward_and_backward(
          x, [&](const Tensor& t) { return batch_norm(t, running_mean, running_var, weight, bias, true); }, min_ms);
      const auto rectify = forward_and_backward(
          x, [](const Tensor& t) { return relu(t); }, min_ms);
      std::printf("| %s | %s | %.2f \\| %.2f | %.2f \\| %.2f | %.2f \\| %.2f |\n",
                  std::string(dtype_name(dtype)).c_str(), x.shape_string().c_str(), pool.first, pool.second, norm.first,
                  norm.second, rectify.first, rectify.second);
    }
  }
}
