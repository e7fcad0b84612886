// The CPU kernels' results must not depend on how many threads compute them:
// ThreadTuner changes the count during training, so a dependence would make
// two runs of the same seed differ. Catches Eigen's own parallel GEMM (its
// depth blocking follows the thread count) and weight-gradient partials cut
// by thread ranges.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "core/generator.h"
#include "core/threads.h"

using namespace mt;

namespace {

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = static_cast<const float*>(c.data_ptr());
  return {p, p + c.numel()};
}

// The outputs of `compute` (forward results and gradients) with `threads` threads.
std::vector<std::vector<float>> with_threads(int threads, const std::function<std::vector<Tensor>()>& compute) {
  const int before = num_threads();
  set_num_threads(threads);
  std::vector<std::vector<float>> out;
  for (const Tensor& t : compute()) out.push_back(values(t));
  set_num_threads(before);
  return out;
}

void check_same_on_1_2_and_3_threads(const std::function<std::vector<Tensor>()>& compute) {
  const auto one = with_threads(1, compute);
  for (int threads : {2, 3}) {
    INFO(threads << " threads");
    const auto many = with_threads(threads, compute);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      INFO("output " << i);
      REQUIRE(many[i].size() == one[i].size());
      CHECK(std::memcmp(many[i].data(), one[i].data(), one[i].size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("CPU GEMM (forward and backward of linear) is bit-identical on 1, 2 and 3 threads", "[kernels][threads]") {
  check_same_on_1_2_and_3_threads([] {
    Generator gen(7);
    Tensor x = randn({192, 784}, kF32, kCPU, &gen).requires_grad_();
    Tensor w = randn({256, 784}, kF32, kCPU, &gen).requires_grad_();
    Tensor b = randn({256}, kF32, kCPU, &gen).requires_grad_();
    Tensor y = linear(x, w, b, LinearActivation::Gelu);
    sum(mul(y, y)).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  });
}

TEST_CASE("CPU batched matmul is bit-identical on 1, 2 and 3 threads", "[kernels][threads]") {
  check_same_on_1_2_and_3_threads([] {
    Generator gen(8);
    const Tensor a = randn({6, 130, 70}, kF32, kCPU, &gen);
    const Tensor b = randn({6, 70, 300}, kF32, kCPU, &gen);
    return std::vector<Tensor>{matmul(a, b), matmul(a.transpose(1, 2).contiguous().transpose(1, 2), b)};
  });
}

// A transformer's weight gradient: a long reduction (K = tokens) into a
// small output. A library that splits K over threads when the output is too
// small to keep them busy (oneDNN may) changes the sum's order, and so its
// last bits, with the thread count. Also in bf16, oneDNN's other kernels.
TEST_CASE("CPU GEMM with a long reduction into a small output is bit-identical on 1, 2 and 3 threads",
          "[kernels][threads]") {
  for (const DType dtype : {kF32, kBF16}) {
    INFO(dtype_name(dtype));
    check_same_on_1_2_and_3_threads([dtype] {
      Generator gen(12);
      const Tensor tokens = randn({4096, 64}, kF32, kCPU, &gen).to(dtype);
      const Tensor grads = randn({4096, 96}, kF32, kCPU, &gen).to(dtype);
      return std::vector<Tensor>{matmul(tokens.transpose(0, 1), grads).to(kF32)};
    });
  }
}

// oneDNN's weight gradient splits the batch over threads; it must still sum
// in an order that does not depend on how many there are.
TEST_CASE("CPU conv2d forward and backward are bit-identical on 1, 2 and 3 threads", "[kernels][threads]") {
  for (const DType dtype : {kF32, kBF16}) {
    INFO(dtype_name(dtype));
    check_same_on_1_2_and_3_threads([dtype] {
      Generator gen(9);
      Tensor x = randn({13, 8, 14, 14}, kF32, kCPU, &gen).to(dtype).requires_grad_();
      Tensor w = randn({16, 8, 3, 3}, kF32, kCPU, &gen).to(dtype).requires_grad_();
      Tensor b = randn({16}, kF32, kCPU, &gen).to(dtype).requires_grad_();
      Tensor y = conv2d(x, w, b, 1, 1);
      sum(mul(y, y)).backward();
      return std::vector<Tensor>{y.to(kF32), x.grad().to(kF32), w.grad().to(kF32), b.grad().to(kF32)};
    });
  }
}

TEST_CASE("CPU softmax, layer_norm and sums are bit-identical on 1, 2 and 3 threads", "[kernels][threads]") {
  check_same_on_1_2_and_3_threads([] {
    Generator gen(10);
    Tensor x = randn({512, 384}, kF32, kCPU, &gen).requires_grad_();
    Tensor g = randn({384}, kF32, kCPU, &gen).requires_grad_();
    Tensor s = softmax(x, -1);
    Tensor n = layer_norm(x, {384}, g);
    sum(mul(n, s)).backward();
    return std::vector<Tensor>{s, n, sum(x, {0}), x.grad(), g.grad()};
  });
}

// Strided loads (transposes, broadcasts, slices) and stores into strided
// outputs split their runs across threads. Catches a thread starting its
// range at the wrong element (the unravelling of its first row) as well as
// any dependence on the thread count.
TEST_CASE("CPU strided copies in and out are correct and bit-identical on 1, 2 and 3 threads", "[kernels][threads]") {
  Generator gen(10);
  const Tensor base = randn({24, 40, 90}, kF32, kCPU, &gen);
  const Tensor row = randn({90}, kF32, kCPU, &gen);
  auto compute = [&] {
    const Tensor permuted = base.permute({2, 0, 1}).contiguous();      // strided load
    const Tensor sliced = base.slice(2, 3, 90, 2).contiguous();        // offset and step
    const Tensor broadcast = add(row.expand({24, 40, 90}), 0.0);       // stride-0 load
    Tensor into = zeros({90, 24, 40}, kF32, kCPU).permute({1, 2, 0});  // strided store
    copy_(into, base);
    return std::vector<Tensor>{permuted, sliced, broadcast, into.contiguous()};
  };
  check_same_on_1_2_and_3_threads(compute);
  const std::vector<Tensor> out = compute();
  const std::vector<float> b = values(base), r = values(row);
  const std::vector<float> permuted = values(out[0]), sliced = values(out[1]), broadcast = values(out[2]);
  const std::vector<float> stored = values(out[3]);
  int mismatches = 0;
  for (int64_t i = 0; i < 24; ++i) {
    for (int64_t j = 0; j < 40; ++j) {
      for (int64_t k = 0; k < 90; ++k) {
        const float want = b[static_cast<size_t>((i * 40 + j) * 90 + k)];
        mismatches += permuted[static_cast<size_t>((k * 24 + i) * 40 + j)] != want;
        mismatches += broadcast[static_cast<size_t>((i * 40 + j) * 90 + k)] != r[static_cast<size_t>(k)];
        mismatches += stored[static_cast<size_t>((i * 40 + j) * 90 + k)] != want;
        if (k >= 3 && (k - 3) % 2 == 0) {
          mismatches += sliced[static_cast<size_t>((i * 40 + j) * 44 + (k - 3) / 2)] != want;
        }
      }
    }
  }
  CHECK(mismatches == 0);
}

// A copy within one tensor (x = x^T, into either a contiguous or a strided
// destination) must read every element before it writes any: a strided copy
// that gathers straight into the destination overwrites values it has yet
// to read. Catches the direct path taken for overlapping source and
// destination.
TEST_CASE("CPU copy from a view of the same tensor transposes correctly (aliasing bugs)", "[kernels][threads]") {
  Generator gen(11);
  const Tensor original = randn({48, 48}, kF32, kCPU, &gen);
  const std::vector<float> o = values(original);
  Tensor gathered = original.clone();
  copy_(gathered, gathered.t());  // contiguous destination, strided source
  Tensor scattered = original.clone();
  copy_(scattered.t(), scattered);  // strided destination, contiguous source
  const std::vector<float> g = values(gathered), sc = values(scattered);
  int mismatches = 0;
  for (size_t i = 0; i < 48; ++i) {
    for (size_t j = 0; j < 48; ++j) {
      mismatches += g[i * 48 + j] != o[j * 48 + i];
      mismatches += sc[i * 48 + j] != o[j * 48 + i];
    }
  }
  CHECK(mismatches == 0);
}
