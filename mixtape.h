// The one header a mixtape user includes.
#pragma once

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "optim/optimizer.h"
