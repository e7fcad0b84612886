#include "core/memory_ledger.h"

#include <map>
#include <memory>
#include <mutex>

#include "core/caching_allocator.h"
#include "core/tensor.h"

namespace mt {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Parameters: return "parameters";
    case MemoryCategory::MasterWeights: return "master_weights";
    case MemoryCategory::Gradients: return "gradients";
    case MemoryCategory::OptimizerState: return "optimizer_state";
    case MemoryCategory::Activations: return "activations";
    case MemoryCategory::AutocastCache: return "autocast_cache";
    case MemoryCategory::Fp8Activations: return "fp8_activations";
    case MemoryCategory::Fp8WeightCasts: return "fp8_weight_casts";
    case MemoryCategory::Fp8State: return "fp8_state";
    case MemoryCategory::Workspace: return "workspace";
    case MemoryCategory::Data: return "data";
    case MemoryCategory::Other: return "other";
  }
  return "?";
}

namespace detail {

class DeviceLedger {
 public:
  void add(MemoryCategory c, int64_t bytes) {
    std::lock_guard lock(mutex_);
    change(c, bytes);
  }
  void remove(MemoryCategory c, int64_t bytes) {
    std::lock_guard lock(mutex_);
    change(c, -bytes);
  }
  // Moves `storage` to `to` (its category is guarded by this mutex).
  void refile(Storage& storage, MemoryCategory to, bool only_other) {
    std::lock_guard lock(mutex_);
    const MemoryCategory from = storage.memory_category_;
    if (from == to || (only_other && from != MemoryCategory::Other)) return;
    const auto bytes = static_cast<int64_t>(storage.nbytes());
    change(from, -bytes);
    change(to, bytes);
    storage.memory_category_ = to;
    // Filed while memory stands at its peak (an allocation is often filed
    // right after it is made): the breakdown at the peak learns it too.
    if (book_.total_current == book_.total_peak) book_.at_peak = book_.current;
  }
  MemoryLedger snapshot() {
    std::lock_guard lock(mutex_);
    return book_;
  }
  void reset_peak() {
    std::lock_guard lock(mutex_);
    book_.peak = book_.current;
    book_.at_peak = book_.current;
    book_.total_peak = book_.total_current;
  }

 private:
  void change(MemoryCategory c, int64_t bytes) {
    const auto i = static_cast<size_t>(c);
    book_.current[i] += bytes;
    book_.total_current += bytes;
    book_.peak[i] = std::max(book_.peak[i], book_.current[i]);
    if (book_.total_current > book_.total_peak) {
      book_.total_peak = book_.total_current;
      book_.at_peak = book_.current;
    }
  }

  std::mutex mutex_;
  MemoryLedger book_;
};

DeviceLedger& ledger_for(Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<DeviceLedger>> ledgers;
  std::lock_guard lock(mutex);
  auto& slot = ledgers[{static_cast<int>(device.type), device.index}];
  if (!slot) slot = std::make_unique<DeviceLedger>();
  return *slot;
}

namespace {
thread_local MemoryCategory t_scope_category = MemoryCategory::Other;
}

MemoryCategory scope_category() { return t_scope_category; }
void ledger_add(DeviceLedger& ledger, MemoryCategory category, int64_t bytes) { ledger.add(category, bytes); }
void ledger_remove(DeviceLedger& ledger, MemoryCategory category, int64_t bytes) { ledger.remove(category, bytes); }

}  // namespace detail

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(detail::t_scope_category) {
  detail::t_scope_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { detail::t_scope_category = previous_; }

MemoryLedger memory_ledger(Device device) {
  MemoryLedger ledger = detail::ledger_for(device).snapshot();
  if (!device.is_cpu()) {
    if (auto* caching = dynamic_cast<const CachingAllocator*>(&allocator_for(device)); caching != nullptr) {
      const CachingAllocatorStats s = caching->detailed_stats();
      ledger.reserved_unused = std::max<int64_t>(0, s.reserved_bytes - ledger.total_current);
    }
  }
  return ledger;
}

void reset_memory_ledger_peak(Device device) { detail::ledger_for(device).reset_peak(); }

namespace {
void refile(const Tensor& t, MemoryCategory category, bool only_other) {
  if (!t.defined() || t.storage() == nullptr) return;
  Storage& s = *t.storage();
  s.ledger().refile(s, category, only_other);
}
}  // namespace

void tag_memory(const Tensor& t, MemoryCategory category) { refile(t, category, false); }
void tag_memory_if_other(const Tensor& t, MemoryCategory category) { refile(t, category, true); }

}  // namespace mt
