#include "core/host_sync.h"

#include <atomic>

#include "runtime/error.h"

namespace mt {
namespace {

std::atomic<int64_t> sync_count{0};
thread_local std::string forbidden_reason;  // empty: syncs allowed

}  // namespace

void note_host_sync(Device device, const char* what) {
  if (device.is_cpu()) return;
  if (!forbidden_reason.empty()) {
    fail(
        "{}: '{}' on {} makes the host wait for the device, which is not allowed here; keep the value on the "
        "device (or read it asynchronously outside the region)",
        forbidden_reason, what, device);
  }
  sync_count.fetch_add(1, std::memory_order_relaxed);
}

int64_t host_sync_count() { return sync_count.load(std::memory_order_relaxed); }

ForbidHostSyncs::ForbidHostSyncs(std::string reason) : previous_(forbidden_reason) {
  forbidden_reason = std::move(reason);
}

ForbidHostSyncs::~ForbidHostSyncs() { forbidden_reason = previous_; }

}  // namespace mt
