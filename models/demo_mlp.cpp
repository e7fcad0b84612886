#include "models/demo_mlp.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/generator.h"

namespace mt::models {

Dataset make_demo_dataset(int64_t n, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = uniform({n, 2}, -2.0, 2.0, kF32, kCPU, &gen);
  const std::vector<double> xy = x.to_vector();
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i) {
    const double a = xy[2 * i], b = xy[2 * i + 1];
    const double r = std::sqrt(a * a + b * b);
    labels[i] = std::sin(2.0 * r) + 0.5 * a > 0 ? 1 : (b > 0 ? 2 : 0);
  }
  return {x, from_vector(labels, {n})};
}

namespace {

// PyTorch's default Linear initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Tensor init_parameter(const Shape& shape, int64_t fan_in, Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return uniform(shape, -bound, bound, kF32, kCPU, &gen).requires_grad_();
}

}  // namespace

DemoResult train_demo_mlp(const DemoOptions& options, const std::function<void(int, double)>& on_step) {
  Generator gen(options.seed);
  const Dataset train = make_demo_dataset(2048, options.seed + 1);
  const Dataset test = make_demo_dataset(1024, options.seed + 2);
  const int64_t h = options.hidden;
  std::vector<Tensor> params = {init_parameter({h, 2}, 2, gen), init_parameter({h}, 2, gen),
                                init_parameter({h, h}, h, gen), init_parameter({h}, h, gen),
                                init_parameter({3, h}, h, gen), init_parameter({3}, h, gen)};
  auto forward = [&](const Tensor& x) {
    Tensor a = relu(linear(x, params[0], params[1]));
    a = relu(linear(a, params[2], params[3]));
    return linear(a, params[4], params[5]);
  };

  DemoResult result;
  const int64_t batches = train.x.size(0) / options.batch;
  for (int step = 0; step < options.steps; ++step) {
    const int64_t begin = (step % batches) * options.batch;
    const Tensor loss = cross_entropy(forward(train.x.narrow(0, begin, options.batch)),
                                      train.y.narrow(0, begin, options.batch));
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the graph
      for (Tensor& p : params) copy_(p, sub(p, mul(p.grad(), options.lr)));
    }
    result.losses.push_back(loss.item<double>());
    if (on_step) on_step(step + 1, result.losses.back());
  }
  NoGradGuard no_grad;
  const Tensor predicted = argmax(forward(test.x), 1);
  result.test_accuracy = mean(eq(predicted, test.y).to(kF32)).item<double>();
  return result;
}

}  // namespace mt::models
