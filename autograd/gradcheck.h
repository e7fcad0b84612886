// gradcheck: compares autograd's gradients with central finite differences in f64.
//
// fn maps the inputs (f64 tensors that require grad) to one output tensor.
// The check projects the output on a fixed random direction r, so one
// backward gives d(sum(r * fn(x)))/dx, and compares every element with
// (L(x + h e_i) - L(x - h e_i)) / 2h.
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
