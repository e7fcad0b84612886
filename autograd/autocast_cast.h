// Applying the autocast policy inside ops: cast an op's floating inputs to the
// dtype amp::autocast_target() picks, through the weight-cast cache. The casts
// are ordinary `to(dtype)` tape nodes, so gradients flow back in each input's
// original dtype.
#pragma once

#include <vector>

#include "amp/autocast.h"
#include "core/tensor.h"

namespace mt::autograd {

// Returns the inputs cast for `op` (unchanged when autocast is off or the policy needs nothing).
std::vector<Tensor> autocast_inputs(amp::Op op, const std::vector<Tensor>& inputs);
Tensor autocast_input(amp::Op op, const Tensor& input);

}  // namespace mt::autograd
