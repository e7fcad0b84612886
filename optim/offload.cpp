#include "optim/offload.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/memory_ledger.h"

namespace mt::optim {
namespace {

// What the update needs on the device besides the parameter and gradient.
constexpr std::array<Tensor kernels::ParamSlot::*, 5> kRoles{
    &kernels::ParamSlot::master, &kernels::ParamSlot::state1, &kernels::ParamSlot::state2,
    &kernels::ParamSlot::absmax1, &kernels::ParamSlot::absmax2};

MemoryCategory category_of(Tensor kernels::ParamSlot::*role) {
  return role == &kernels::ParamSlot::master ? MemoryCategory::MasterWeights : MemoryCategory::OptimizerState;
}

// The device buffers of one staging slot: one flat tensor per (state role,
// dtype), long enough for the largest parameter the slot takes (8-bit state
// leaves small tensors in f32, so one role can come in two dtypes).
using Buffers = std::map<std::pair<size_t, DType>, Tensor>;

// The flat device buffers for the parameters staged in slot `parity` (those
// at even or odd positions); none for a role no parameter has (SGD without
// momentum has no state). Sizing each slot by its own parameters keeps the
// staging near one large parameter's state when large and small parameters
// alternate (weight, bias, weight, ...), not two.
Buffers flat_buffers(const std::vector<kernels::ParamSlot>& slots, size_t parity, Device device) {
  std::map<std::pair<size_t, DType>, int64_t> longest;
  for (size_t i = parity; i < slots.size(); i += 2) {
    for (size_t r = 0; r < kRoles.size(); ++r) {
      const Tensor& t = slots[i].*kRoles[r];
      if (!t.defined()) continue;
      int64_t& n = longest[{r, t.dtype()}];
      n = std::max(n, t.numel());
    }
  }
  Buffers buffers;
  for (const auto& [key, n] : longest) {
    Tensor buffer = empty({n}, key.second, device);
    tag_memory(buffer, category_of(kRoles[key.first]));
    buffers[key] = buffer;
  }
  return buffers;
}

// `host`'s place in its buffer (undefined stays undefined).
Tensor staged(const Buffers& buffers, size_t role, const Tensor& host) {
  if (!host.defined()) return host;
  return buffers.at({role, host.dtype()}).narrow(0, 0, host.numel()).view(host.sizes());
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
  const std::array<Buffers, 2> buffers{flat_buffers(slots, 0, device_), flat_buffers(slots, 1, device_)};
  // The buffers come from the compute stream's pool: work queued there
  // before may still use their memory, so the copies start after it.
  started_.record(compute);
  copy_stream_.wait(started_);

  const auto on_device = [&](size_t i) {
    kernels::ParamSlot slot = slots[i];
    for (size_t r = 0; r < kRoles.size(); ++r) slot.*kRoles[r] = staged(buffers[i % 2], r, slots[i].*kRoles[r]);
    return slot;
  };
  const auto copy_in = [&](size_t i) {
    const kernels::ParamSlot staged_slot = on_device(i);
    for (auto role : kRoles) {
      if ((slots[i].*role).defined()) copy_async(staged_slot.*role, slots[i].*role, copy_stream_);
    }
    staging_[i % 2].copied_in->record(copy_stream_);
  };
  const auto copy_out = [&](size_t i) {
    const kernels::ParamSlot staged_slot = on_device(i);
    copy_stream_.wait(*staging_[i % 2].updated);
    for (auto role : kRoles) {
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
