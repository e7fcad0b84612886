// Host syncs: every operation that makes the host wait for a device.
//
// A training step on a GPU should never wait: the host queues kernels and
// runs ahead, and the GPU never idles while the host catches up. The usual
// ways a framework breaks that are an item() on a device value, a blocking
// copy to or from the device, a host-built constant copied over, or an
// explicit synchronize. mixtape routes all of those through
// note_host_sync(), so:
//   * host_sync_count() counts them, on a GPU and on the sim device alike
//     (sim runs eager launches before returning, but the operations that *would* wait
//     on a GPU are the same code paths and are counted the same way);
//   * inside a ForbidHostSyncs region (CUDA-graph capture, tests) any of them
//     is an mt::Error that names the operation.
// The CPU device never syncs: its operations are not counted.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"

namespace mt {

// Records one blocking operation `what` on `device` (a no-op for the CPU).
void note_host_sync(Device device, const char* what);

// Blocking operations so far in this process (all threads).
int64_t host_sync_count();

// While alive, a host sync on this thread throws mt::Error naming `reason`
// (e.g. "CUDA-graph capture") and the operation. Nestable.
class ForbidHostSyncs {
 public:
  explicit ForbidHostSyncs(std::string reason);
  ~ForbidHostSyncs();
  ForbidHostSyncs(const ForbidHostSyncs&) = delete;
  ForbidHostSyncs& operator=(const ForbidHostSyncs&) = delete;

 private:
  std::string previous_;
};

}  // namespace mt
