// How many times `fn` launched the kernel named `kernel` (the launch
// profile, runtime/launch_check.h): how a test sees which implementation a
// dispatcher chose without reading its output.
#pragma once

#include <string>

#include "runtime/launch_check.h"

namespace mt::test {

template <typename Fn>
long long launches_of(const std::string& kernel, Fn&& fn) {
  kernels::profile_reset();
  kernels::set_profiling(true);
  fn();
  kernels::set_profiling(false);
  long long calls = 0;
  for (const auto& e : kernels::profile_entries()) {
    if (e.name == kernel) calls += e.calls;
  }
  return calls;
}

}  // namespace mt::test
