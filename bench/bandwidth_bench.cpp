// Memory-bound kernels against the device-to-device copy bandwidth.
//
//   bandwidth_bench [--mb 256] [--min-ms 200]
//
// Each kernel is timed on tensors of a few hundred MB and reported as GB/s of
// bytes it must read plus write, and as % of a cudaMemcpy device-to-device copy
// of the same size (counted the same way: read + write), the target
// being >= 80%. Runs through mixtape's op API on the CUDA device, so it times
// what training uses (dispatch, caching allocator, kernels). Exits 77 without
// a GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/common/dispatch_helpers.h"
#include "kernels/cross_entropy/api.h"
#include "kernels/layer_norm/api.h"
#include "kernels/softmax/api.h"
#include "mixtape.h"
#include "timing.h"

namespace {

using mt::bench::time_ms;

void report(const char* name, double bytes, double ms, double copy_gbs) {
  const double gbs = bytes / (ms * 1e6);
  std::printf("| %-34s | %8.3f | %8.0f | %5.1f%% |\n", name, ms, gbs, 100.0 * gbs / copy_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bandwidth_bench: no GPU\n");
    return 77;
  }
  double mb = 256, min_ms = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) mb = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--min-ms") == 0) min_ms = std::atof(argv[i + 1]);
  }
  using namespace mt;
  NoGradGuard no_grad;
  const auto n32 = static_cast<int64_t>(mb * (1 << 20) / 4);  // f32 elements in `mb` megabytes

  // The reference: a plain device-to-device copy of `mb` MB.
  void *src = nullptr, *dst = nullptr;
  const size_t bytes = static_cast<size_t>(n32) * 4;
  cudaMalloc(&src, bytes);
  cudaMalloc(&dst, bytes);
  const double copy_ms = time_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); }, min_ms);
  const double copy_gbs = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e6);
  cudaFree(src);
  cudaFree(dst);
  std::printf("| kernel (%g MB per operand) | ms | GB/s | %% of copy |\n|---|---|---|---|\n", mb);
  std::printf("| %-34s | %8.3f | %8.0f | 100.0%% |\n", "cudaMemcpy D2D (read + write)", copy_ms, copy_gbs);

  for (DType dtype : {kF32, kF16, kBF16}) {
    const int64_t n = n32 * 4 / static_cast<int64_t>(element_size(dtype));
    const double elsize = static_cast<double>(element_size(dtype));
    const std::string tag = std::string(" ") + std::string(dtype_name(dtype));
    const Tensor a = randn({n / 1024, 1024}, kF32).to(dtype).to(kCUDA);
    const Tensor b = randn({n / 1024, 1024}, kF32).to(dtype).to(kCUDA);
    report(("add" + tag).c_str(), 3.0 * n * elsize, time_ms([&] { add(a, b); }, min_ms), copy_gbs);
    report(("gelu" + tag).c_str(), 2.0 * n * elsize, time_ms([&] { gelu(a); }, min_ms), copy_gbs);
    report(("softmax rows of 1024" + tag).c_str(), 2.0 * n * elsize, time_ms([&] { softmax(a, 1); }, min_ms), copy_gbs);
    // The softmax ladder (kernels/softmax/ladder/ladder.cu), rung by rung, on the same rows.
    const Tensor y = empty_like(a);
    for (const auto rung : {kernels::SoftmaxRung::V1ThreadPerRow, kernels::SoftmaxRung::V2WarpPerRow,
                            kernels::SoftmaxRung::V3VectorLoads, kernels::SoftmaxRung::V4BlockPerRow}) {
      const auto run = [&] {
        mt::cuda::softmax_ladder_forward(rung, kernels::device_buffers::kernel_dtype(dtype, "softmax"), a.data_ptr(),
                                         y.data_ptr(), n / 1024, 1024, {});
      };
      std::string label = "  softmax ";
      label.append(kernels::softmax_rung_name(rung)).append(tag);
      report(label.c_str(), 2.0 * n * elsize, time_ms(run, min_ms), copy_gbs);
    }
    const Tensor w = ones({1024}, dtype, kCUDA), bias = zeros({1024}, dtype, kCUDA);
    report(("layer_norm rows of 1024" + tag).c_str(), 2.0 * n * elsize,
           time_ms([&] { layer_norm(a, {1024}, w, bias); }, min_ms), copy_gbs);
    // The layer_norm ladder (kernels/layer_norm/ladder/ladder.cu), rung by rung, on the same rows.
    const Tensor mean = empty({n / 1024}, kF32, kCUDA), rstd = empty({n / 1024}, kF32, kCUDA);
    for (const auto rung : {kernels::LayerNormRung::V1ThreadPerRow, kernels::LayerNormRung::V2WarpPerRow,
                            kernels::LayerNormRung::V3VectorLoads, kernels::LayerNormRung::V4BlockPerRow}) {
      const auto run = [&] {
        mt::cuda::layer_norm_ladder_forward(rung, kernels::device_buffers::kernel_dtype(dtype, "layer_norm"),
                                            a.data_ptr(), w.data_ptr(), bias.data_ptr(), 1e-5, y.data_ptr(),
                                            mean.data_ptr(), rstd.data_ptr(), n / 1024, 1024, {});
      };
      std::string label = "  layer_norm ";
      label.append(kernels::layer_norm_rung_name(rung)).append(tag);
      report(label.c_str(), 2.0 * n * elsize, time_ms(run, min_ms), copy_gbs);
    }
    const Tensor target = zeros({n / 1024}, kI64, kCUDA);
    report(("cross_entropy 1024 classes" + tag).c_str(), 1.0 * n * elsize,
           time_ms([&] { cross_entropy(a, target); }, min_ms), copy_gbs);
  }
  return 0;
}
