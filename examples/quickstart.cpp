// The README's example: a linear classifier trained with autograd and SGD,
// then the same forward in f16 to show low-precision compute. Built and run as
// a test, so the README's code stays true.
#include <cstdio>

#include "mixtape.h"

int main() {
  mt::Generator gen(0);
  const mt::Tensor x = mt::randn({256, 4}, mt::kF32, mt::kCPU, &gen);
  const mt::Tensor labels = mt::argmax(x, 1);  // class = index of the largest feature
  mt::Tensor w = mt::mul(mt::randn({4, 4}, mt::kF32, mt::kCPU, &gen), 0.1).requires_grad_();
  mt::Tensor b = mt::zeros({4}).requires_grad_();

  for (int step = 0; step < 200; ++step) {
    const mt::Tensor loss = mt::cross_entropy(mt::linear(x, w, b), labels);
    w.set_grad({});
    b.set_grad({});
    loss.backward();
    mt::NoGradGuard no_grad;  // the update is not recorded on the tape
    mt::copy_(w, w - w.grad() * 0.5);
    mt::copy_(b, b - b.grad() * 0.5);
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item<double>());
  }

  mt::NoGradGuard no_grad;
  const mt::Tensor logits16 = mt::linear(x.to(mt::kF16), w.to(mt::kF16), b.to(mt::kF16));
  const double accuracy = mt::mean(mt::eq(mt::argmax(logits16, 1), labels).to(mt::kF32)).item<double>();
  std::printf("f16 accuracy %.3f\n", accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
