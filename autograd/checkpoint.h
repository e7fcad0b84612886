// Activation checkpointing: y = checkpoint(fn, inputs) runs fn without
// recording it (its intermediates are freed at once) and keeps only the
// inputs; backward runs fn again, with the tape on, under the autocast state
// and from the dropout random stream its forward had, and backpropagates
// through that recomputation. Gradients are identical to running fn plainly;
// peak memory drops by fn's activations, at the price of one more forward.
//
// As PyTorch's reentrant torch.utils.checkpoint: every tensor fn uses that
// needs a gradient must be a leaf (a parameter) or one of `inputs`; the
// parameters inside get their gradients during the recomputation. When no
// input needs a gradient fn simply runs (the parameters inside would
// otherwise get none). Only the default generator's stream is replayed.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace mt {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// True on this thread while a checkpoint's backward reruns its function.
// Layers with side effects in training mode (BatchNorm's running statistics
// and batch counter) skip them then, so a checkpointed stage updates them
// once, as the plain one does. (PyTorch's checkpoint updates them twice.)
bool checkpoint_recomputing();

}  // namespace mt
