#include "optim/offload.h"

#include <algorithm>

#include "core/memory_ledger.h"

namespace mt::optim {
namespace {

// The device buffers of one staging slot: one flat tensor per state role,
// long enough for the largest parameter the slot takes.
struct Buffers {
  Tensor master, state1, state2;
};

// A flat device buffer for `role` of the parameters staged in slot `parity`
// (those at even or odd positions), undefined when none has that role (SGD
// without momentum has no state). Sizing each slot by its own parameters
// keeps the staging near one large parameter's state when large and small
// parameters alternate (weight, bias, weight, ...), not two.
Tensor flat_buffer(const std::vector<kernels::ParamSlot>& slots, size_t parity, Tensor kernels::ParamSlot::*role,
                   Device device, MemoryCategory category) {
  int64_t longest = 0;
  DType dtype = kF32;
  for (size_t i = parity; i < slots.size(); i += 2) {
    const Tensor& t = slots[i].*role;
    if (!t.defined()) continue;
    longest = std::max(longest, t.numel());
    dtype = t.dtype();
  }
  if (longest == 0) return Tensor();
  Tensor buffer = empty({longest}, dtype, device);
  tag_memory(buffer, category);
  return buffer;
}

// `host`'s place in `buffer` (undefined stays undefined).
Tensor staged(const Tensor& buffer, const Tensor& host) {
  if (!host.defined()) return host;
  return buffer.narrow(0, 0, host.numel()).view(host.sizes());
}

}  // namespace

OffloadPipeline::OffloadPipeline(Device device)
    : device_(device), copy_stream_(Stream::create(device)), started_(device), finished_(device) {
  for (Staging& s : staging_) {
    s.copied_in = std::make_unique<Event>(device);
    s.updated = std::make_unique<Event>(device);
  }
}

OffloadPipeline::~OffloadPipeline() {
  try {
    wait();
  } catch (...) {  // a failed device cannot be waited for; nothing else to do in a destructor
  }
}

void OffloadPipeline::run(const std::vector<kernels::ParamSlot>& slots,
                          const std::function<void(const kernels::ParamSlot& on_device)>& update) {
  if (slots.empty()) return;
  const Stream compute = current_stream(device_);
  std::array<Buffers, 2> buffers;
  for (size_t parity = 0; parity < 2; ++parity) {
    Buffers& b = buffers[parity];
    b.master = flat_buffer(slots, parity, &kernels::ParamSlot::master, device_, MemoryCategory::MasterWeights);
    b.state1 = flat_buffer(slots, parity, &kernels::ParamSlot::state1, device_, MemoryCategory::OptimizerState);
    b.state2 = flat_buffer(slots, parity, &kernels::ParamSlot::state2, device_, MemoryCategory::OptimizerState);
  }
  // The buffers come from the compute stream's pool: work queued there
  // before may still use their memory, so the copies start after it.
  started_.record(compute);
  copy_stream_.wait(started_);

  const auto on_device = [&](size_t i) {
    const Buffers& b = buffers[i % 2];
    kernels::ParamSlot slot = slots[i];
    slot.master = staged(b.master, slots[i].master);
    slot.state1 = staged(b.state1, slots[i].state1);
    slot.state2 = staged(b.state2, slots[i].state2);
    return slot;
  };
  const auto copy_in = [&](size_t i) {
    const kernels::ParamSlot staged_slot = on_device(i);
    for (auto role : {&kernels::ParamSlot::master, &kernels::ParamSlot::state1, &kernels::ParamSlot::state2}) {
      if ((slots[i].*role).defined()) copy_async(staged_slot.*role, slots[i].*role, copy_stream_);
    }
    staging_[i % 2].copied_in->record(copy_stream_);
  };
  const auto copy_out = [&](size_t i) {
    const kernels::ParamSlot staged_slot = on_device(i);
    copy_stream_.wait(*staging_[i % 2].updated);
    for (auto role : {&kernels::ParamSlot::master, &kernels::ParamSlot::state1, &kernels::ParamSlot::state2}) {
      if ((slots[i].*role).defined()) copy_async(slots[i].*role, staged_slot.*role, copy_stream_);
    }
  };

  copy_in(0);
  for (size_t i = 0; i < slots.size(); ++i) {
    // i + 1 goes into the slot i - 1 used: its copy out is already queued before this on the copy stream.
    if (i + 1 < slots.size()) copy_in(i + 1);
    compute.wait(*staging_[i % 2].copied_in);
    update(on_device(i));
    staging_[i % 2].updated->record(compute);
    copy_out(i);
  }
  // The buffers return to the compute stream's pool when this returns.
  finished_.record(copy_stream_);
  compute.wait(finished_);
}

}  // namespace mt::optim
