// Synchronised batch norm for data parallel training (PyTorch's
// nn.SyncBatchNorm.convert_sync_batchnorm): every BatchNorm2d of a model
// normalises with the statistics of the whole batch, every rank's samples,
// instead of its own shard's.
//
// Each BatchNorm2d keeps its parameters and buffers; only its training
// forward changes (nn::BatchNorm2d::sync_statistics -> sync_batch_norm in
// autograd/ops.h): per channel, each rank's count, mean and sum of squared
// deviations are combined with Chan's formula in f32 whatever the input
// dtype, backward all-reduces the two sums the input's gradient needs, and
// the running statistics are updated with the global ones, identically on
// every rank. Three all-reduces of 2C + 1 values at most per layer and step.
#pragma once

#include "distributed/process_group.h"
#include "nn/module.h"

namespace mt::dist {

// Every BatchNorm2d in `model` (itself included) from now on synchronises
// over `group` (the world by default); returns how many there were. Call it
// on every rank, before training; DDP's gradient averaging still applies to
// the weights and biases. No group: the world (NCCL's for CUDA tensors).
int convert_sync_batchnorm(nn::Module& model, ProcessGroup* group = nullptr);

}  // namespace mt::dist
