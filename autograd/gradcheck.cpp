#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    MT_CHECK(!t.defined() || t.dtype() == kF64, "gradcheck: inputs must be f64 for finite differences, got {}",
             t.dtype());
    // Fresh contiguous leaves so perturbing them is safe and grads start empty.
    Tensor leaf = t.defined() ? t.detach().clone().detach() : Tensor();
    if (leaf.defined() && t.requires_grad()) leaf.requires_grad_();
    xs.push_back(leaf);
  }

  Generator gen(1234);
  Tensor out = fn(xs);
  const Tensor direction = randn(out.sizes(), kF64, out.device(), &gen);
  auto projected = [&](const std::vector<Tensor>& args) { return sum(mul(fn(args), direction)); };
  projected(xs).backward();

  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined() || !xs[k].requires_grad()) continue;
    const Tensor analytic = xs[k].grad();
    if (!analytic.defined()) return {false, fmt::format("input {} received no gradient", k)};
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      NoGradGuard no_grad;
      const double original = read_element(xs[k], i);
      write_element(xs[k], i, original + options.eps);
      const double plus = projected(xs).item<double>();
      write_element(xs[k], i, original - options.eps);
      const double minus = projected(xs).item<double>();
      write_element(xs[k], i, original);
      const double numeric = (plus - minus) / (2 * options.eps);
      const double got = read_element(analytic, analytic.offset() + i);
      if (!(std::fabs(got - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
        return {false, fmt::format("input {} element {}: analytic {} vs numeric {}", k, i, got, numeric)};
      }
    }
  }
  return {};
}

}  // namespace mt
