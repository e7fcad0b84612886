// Which gradients are still multiplied by a loss scale.
//
// GradScaler records here when it scales a loss and when it unscales an
// optimizer's gradients; clip_grad_norm_ (optim/, a lower layer than the
// scaler) asks before clipping. Clipping scaled gradients is the most common
// AMP mistake: the threshold would apply to gradients 65536x too large.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace mt::amp {

void note_loss_scaled(const void* scaler);
void note_unscaled(const void* scaler, const std::vector<Tensor>& params);
void note_scaler_reset(const void* scaler);  // after update(), or when the scaler is destroyed

// Throws mt::Error naming `op` when a gradient of `params` is still scaled.
void check_gradients_unscaled(const std::vector<Tensor>& params, const char* op);

}  // namespace mt::amp
