// The known-answer check of each own kernel family (kernels/verify/trust.h).
//
// Each check runs the family's kernel on a small problem whose edges are
// ragged for its tiles (so partial tiles, the epilogue and masking all run)
// and compares it with an answer computed on the host from the same rounded
// inputs: f64 sums for the GEMMs, the CPU's tested fused attention, the CPU's
// exact INT8 GEMM. A few units in the last place of the output dtype pass; a
// wrong fragment layout, a lost tile or a stale barrier phase give errors of
// the order of the values themselves.
//
// A check takes well under a second on a GPU and a few seconds on the
// simulator. It can hang only if the kernel hangs: callers that must survive
// that run it in a child process (tools/train/kernel_verification.h).
#pragma once

#include "core/device.h"
#include "kernels/verify/trust.h"

namespace mt::kernels::verify {

// Runs `family`'s check on `device` (sim or CUDA). Verified, or Failed with
// the largest error (or the exception a launch threw) in `detail`;
// NotApplicable when the device's identity says the chip cannot run it.
CheckResult run_check(OwnFamily family, Device device);

}  // namespace mt::kernels::verify
