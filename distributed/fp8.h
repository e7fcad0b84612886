// FP8 under data parallel: every rank must quantize with the same scales, or
// the ranks' weights drift apart (a known cause of FP8 divergence). Delayed
// scaling takes its scales from amax histories that each rank fills from its
// own batch; reduce_fp8_amaxes turns this step's amaxes into the max over
// the ranks before amp::Fp8State::update(). Current and block scaling need
// nothing: weights are the same on every rank, and activation and gradient
// scales come from each rank's own tensors.
#pragma once

#include "amp/fp8_recipe.h"
#include "distributed/process_group.h"

namespace mt::dist {

// One all_reduce (max) over every history's newest amax; kernels only, so a
// step that calls it needs no host read of a value.
void reduce_fp8_amaxes(const amp::Fp8State& state, ProcessGroup& group);

}  // namespace mt::dist
