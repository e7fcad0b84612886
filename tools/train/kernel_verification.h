// Running the own kernels' checks (kernels/verify) where a hang cannot hurt:
// each in a child process with a time limit.
//
// The child is a fresh `mixtape info --check-family F --device D` (this very
// executable), started before the parent creates its CUDA context: a forked
// child could not use its parent's context, and a kernel that hangs on the
// hardware hangs only the child, which is killed at the limit ("timed out
// after N s"). The child prints its result as one JSON line; anything else
// (a crash, a signal, garbage) is "failed" with what happened.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "kernels/verify/trust.h"

namespace mt::tools {

struct VerificationOptions {
  double timeout_seconds = 120;               // per family; MT_KERNEL_CHECK_TIMEOUT_S overrides
  std::string executable = "/proc/self/exe";  // a mixtape CLI
};

// Runs `argv` (argv[0] a path) with stdout captured, killed after `timeout`
// seconds. The exit status is -1 and `timed_out` true when it was killed.
struct ChildOutput {
  int exit_status = 0;  // the exit code, or 128 + the signal that ended it
  bool timed_out = false;
  std::string out;
};
ChildOutput run_child(const std::vector<std::string>& argv, double timeout_seconds);

// One family's check in a child; never throws for what the child did.
kernels::verify::CheckResult check_in_child(kernels::verify::OwnFamily family, Device device,
                                            const VerificationOptions& options = {});

// Every family's check on `device`, each in a child; stores the results in
// the cache when the device has an identity (a GPU, or sim under
// MT_SIM_GPU_IDENTITY) and returns them.
std::vector<kernels::verify::CheckResult> verify_families(Device device, const VerificationOptions& options = {});

// What `mixtape info --verify` prints: one row per family (the check's result,
// its time, what `auto` uses on this device from now on).
std::string verification_table(Device device, const std::vector<kernels::verify::CheckResult>& results);

// For a training process before it touches `device`: runs the checks the
// cache lacks for its identity (none on the CPU or plain sim), stores them and
// logs one line per family checked. MT_KERNEL_CHECKS=off skips them: `auto`
// then falls back for every family not already verified.
void verify_missing_families(Device device, const VerificationOptions& options = {});

// MT_KERNEL_CHECKS (on|off), MT_KERNEL_CHECK_TIMEOUT_S and
// MT_SIM_GPU_IDENTITY parsed now: a bad value is an mt::Error naming it.
void check_verification_settings();

}  // namespace mt::tools
