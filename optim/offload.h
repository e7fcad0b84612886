// Offloaded optimizer state streamed through the device, two parameters in
// flight (PrecisionOptions::offload_state).
//
// Master weights and moments live in host memory. For each parameter the
// update kernel needs them on the device, so a side stream copies them in,
// the update runs on the compute stream, and the side stream copies them
// back. Two staging slots on the device let the three overlap:
//
//   copy stream:    in(0) in(1) . . . out(0) in(2) . . . out(1) in(3) ...
//   compute stream:       update(0)      update(1)      update(2) ...
//
// The events that keep it correct: update(i) waits for in(i); out(i) waits
// for update(i); in(i + 2) reuses i's slot and is queued after out(i) on the
// same copy stream. The compute stream waits for the last copy before the
// staging slots are freed, so nothing the caching allocator hands out later
// can still be in use by a copy. On the sim device a test holds each stream's
// work until it is waited for (simulator::begin_deferred_streams), so a
// missing wait gives wrong numbers there too.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "core/stream.h"
#include "kernels/optim/optim.h"

namespace mt::optim {

class OffloadPipeline {
 public:
  explicit OffloadPipeline(Device device);
  // Waits for the last copies back: the host state they write may be freed next.
  ~OffloadPipeline();
  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;
  Device device() const { return device_; }
  // Waits until every copy back to the host state has landed (a host sync).
  void wait() const { copy_stream_.synchronize(); }

  // Calls update(on_device) for each slot in order, on the current stream,
  // with the slot's master and state (host tensors) replaced by device copies
  // staged on the copy stream; writes them back to the host tensors after.
  void run(const std::vector<kernels::ParamSlot>& slots,
           const std::function<void(const kernels::ParamSlot& on_device)>& update);

 private:
  struct Staging {
    std::unique_ptr<Event> copied_in, updated;
  };
  Device device_;
  Stream copy_stream_;
  std::array<Staging, 2> staging_;
  Event started_, finished_;
};

}  // namespace mt::optim
