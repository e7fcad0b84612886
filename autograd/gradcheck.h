// gradcheck: compares autograd's gradients with central finite differences in f64.
//
// fn maps the inputs (f64 tensors that require grad) to one output tensor.
// The check projects the output on a fixed random direction r, so one
// backward gives d(sum(r * fn(x)))/dx, and compares every element with
// (L(x + h e_i) - L(x - h e_i)) / 2h.
//
// Inputs that are leaves requiring grad are perturbed in place, as PyTorch's
// gradcheck does, and restored afterwards (values and any .grad they had):
// fn may reach them some other way than its argument, so a module's own
// parameters are checked by passing them,
//
//   model.to(mt::kF64);
//   gradcheck([&](const auto&) { return model.forward(x); }, model.parameters());
//
// Other inputs (non-leaves, or ones without requires_grad) are handed to fn
// as fresh leaf copies.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mt {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic and numeric values
};

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace mt
