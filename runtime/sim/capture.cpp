// Graph capture on the simulator (record the work queued on one stream,
// replay it later) and deferred streams (hold each stream's work until
// something waits for it).
#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/sim/runtime.h"

namespace mt::simulator {
namespace {

struct CaptureState {
  std::mutex mutex;
  std::atomic<std::uint64_t> stream{0};  // the stream being captured (0: none)
  std::shared_ptr<CapturedWork> work;
};

CaptureState& state() {
  static CaptureState* s = new CaptureState;  // never destroyed: launches may outlive static destructors
  return *s;
}

// One stream's held work. `ran + pending.size()` is how much it was given.
struct HeldStream {
  std::uint64_t ran = 0;
  std::deque<CapturedWork::Node> pending;
};

struct DeferralState {
  std::mutex mutex;
  std::atomic<bool> on{false};
  FlushOrder order = FlushOrder::OldestStreamFirst;
  std::map<std::uint64_t, HeldStream> streams;  // by id: ids grow with creation
};

DeferralState& deferral() {
  static DeferralState* d = new DeferralState;  // never destroyed, as above
  return *d;
}

// Takes the next held node of `stream` if it is before `position`.
bool take_next(std::uint64_t stream, std::uint64_t position, CapturedWork::Node& node) {
  DeferralState& d = deferral();
  const std::lock_guard lock(d.mutex);
  auto it = d.streams.find(stream);
  if (it == d.streams.end() || it->second.pending.empty() || it->second.ran >= position) return false;
  node = std::move(it->second.pending.front());
  it->second.pending.pop_front();
  ++it->second.ran;
  return true;
}

}  // namespace

void begin_capture(std::uint64_t stream) {
  CaptureState& s = state();
  const std::lock_guard lock(s.mutex);
  MT_CHECK(!deferral().on.load(), "graph capture: not while the simulator defers streams");
  MT_CHECK(stream != 0, "graph capture: the default stream cannot be captured; capture a stream of your own");
  MT_CHECK(s.stream.load() == 0, "graph capture: stream {} is already being captured (one capture at a time)",
           s.stream.load());
  s.work = std::make_shared<CapturedWork>();
  s.stream.store(stream);
}

std::shared_ptr<const CapturedWork> end_capture() {
  CaptureState& s = state();
  const std::lock_guard lock(s.mutex);
  MT_CHECK(s.stream.load() != 0, "graph capture: end_capture without begin_capture");
  s.stream.store(0);
  return std::exchange(s.work, nullptr);
}

bool records_work(std::uint64_t stream, const char* what) {
  const std::uint64_t capturing = state().stream.load(std::memory_order_relaxed);
  if (capturing == 0) return defers(stream);
  MT_CHECK(stream != 0,
           "{} was queued on the default stream while stream {} is being captured: on a GPU this invalidates the "
           "capture (queue it on the capturing stream)",
           what, capturing);
  return stream == capturing;
}

void record_node(std::uint64_t stream, const char* name, std::function<void()> run) {
  if (defers(stream)) {
    DeferralState& d = deferral();
    const std::lock_guard lock(d.mutex);
    d.streams[stream].pending.push_back({name, std::move(run)});
    return;
  }
  CaptureState& s = state();
  const std::lock_guard lock(s.mutex);
  MT_CHECK(s.work != nullptr, "graph capture: '{}' recorded outside a capture", name);
  s.work->nodes.push_back({name, std::move(run)});
}

void replay(const CapturedWork& work) {
  for (const CapturedWork::Node& node : work.nodes) node.run();
}

void begin_deferred_streams(FlushOrder order) {
  MT_CHECK(state().stream.load() == 0, "deferred streams: not during a graph capture");
  DeferralState& d = deferral();
  const std::lock_guard lock(d.mutex);
  MT_CHECK(!d.on.load(), "deferred streams: already on (one deferral at a time)");
  d.order = order;
  d.streams.clear();
  d.on.store(true);
}

void end_deferred_streams() {
  run_all_deferred();
  DeferralState& d = deferral();
  const std::lock_guard lock(d.mutex);
  d.on.store(false);
  d.streams.clear();
}

bool defers(std::uint64_t stream) { return stream != 0 && deferral().on.load(std::memory_order_relaxed); }

std::uint64_t deferred_position(std::uint64_t stream) {
  DeferralState& d = deferral();
  const std::lock_guard lock(d.mutex);
  const HeldStream& held = d.streams[stream];
  return held.ran + held.pending.size();
}

// A node may itself wait for another stream (run_deferred_until again), so
// none is run with the lock held.
void run_deferred_until(std::uint64_t stream, std::uint64_t position) {
  CapturedWork::Node node;
  while (take_next(stream, position, node)) node.run();
}

void run_all_deferred() {
  std::vector<std::uint64_t> ids;
  {
    DeferralState& d = deferral();
    const std::lock_guard lock(d.mutex);
    for (const auto& [id, held] : d.streams) ids.push_back(id);
    if (d.order == FlushOrder::NewestStreamFirst) std::reverse(ids.begin(), ids.end());
  }
  for (std::uint64_t id : ids) run_deferred_until(id, UINT64_MAX);
}

}  // namespace mt::simulator
