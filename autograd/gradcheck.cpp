#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt {

namespace {

// The storage offsets of t's elements in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  for_each_offset(t.sizes(), t.strides(), t.offset(), [&](int64_t at) { out.push_back(at); });
  return out;
}

// Puts back the .grad each in-place input had before the check.
struct RestoreGrads {
  std::vector<std::pair<Tensor, std::shared_ptr<TensorImpl>>> saved;
  ~RestoreGrads() {
    for (auto& [t, grad] : saved) t.impl()->grad = grad;
  }
};

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<Tensor> xs;
  RestoreGrads restore;
  for (const Tensor& t : inputs) {
    MT_CHECK(!t.defined() || t.dtype() == kF64, "gradcheck: inputs must be f64 for finite differences, got {}",
             t.dtype());
    MT_CHECK(!t.defined() || t.device().host_accessible(),
             "gradcheck: inputs must be on a host-readable device (cpu or sim), got {}", t.device());
    if (t.defined() && t.is_leaf() && t.requires_grad()) {
      restore.saved.emplace_back(t, t.impl()->grad);
      t.impl()->grad.reset();
      xs.push_back(t);
      continue;
    }
    // A fresh contiguous leaf, so perturbing it is safe and its grad starts empty.
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
    const Tensor analytic_grad = xs[k].grad();
    if (!analytic_grad.defined()) return {false, fmt::format("input {} received no gradient", k)};
    const std::vector<double> analytic = analytic_grad.to_vector();
    const std::vector<int64_t> offsets = element_offsets(xs[k]);
    for (size_t i = 0; i < offsets.size(); ++i) {
      NoGradGuard no_grad;
      const double original = read_element(xs[k], offsets[i]);
      write_element(xs[k], offsets[i], original + options.eps);
      const double plus = projected(xs).item<double>();
      write_element(xs[k], offsets[i], original - options.eps);
      const double minus = projected(xs).item<double>();
      write_element(xs[k], offsets[i], original);
      const double numeric = (plus - minus) / (2 * options.eps);
      const double got = analytic[i];
      if (!(std::fabs(got - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
        return {false, fmt::format("input {} element {}: analytic {} vs numeric {}", k, i, got, numeric)};
      }
    }
  }
  return {};
}

}  // namespace mt
