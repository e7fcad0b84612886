// The one header a mixtape user includes: tensors and their ops, autograd,
// the nn layers and initialisers, the optimizers and their LR schedules,
// mixed precision (autocast, the GradScaler, FP8), safetensors files and data
// parallel training. (The datasets and the DataLoader are mixtape::tools',
// tools/data/*.h, linked separately.)
#pragma once

#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"
#include "amp/grad_scaler.h"
#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/fp8.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/generator.h"
#include "core/graph.h"
#include "core/checkpoint_file.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "distributed/ddp.h"
#include "distributed/fp8.h"
#include "distributed/process_group.h"
#include "distributed/sync_batch_norm.h"
#include "distributed/zero.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "runtime/error.h"
