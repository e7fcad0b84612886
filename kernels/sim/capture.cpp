// Graph capture on the simulator: record the work queued on one stream, replay it later.
#include <atomic>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "kernels/sim/runtime.h"

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

}  // namespace

void begin_capture(std::uint64_t stream) {
  CaptureState& s = state();
  const std::lock_guard lock(s.mutex);
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
  if (capturing == 0) return false;
  MT_CHECK(stream != 0,
           "{} was queued on the default stream while stream {} is being captured: on a GPU this invalidates the "
           "capture (queue it on the capturing stream)",
           what, capturing);
  return stream == capturing;
}

void record_node(const char* name, std::function<void()> run) {
  CaptureState& s = state();
  const std::lock_guard lock(s.mutex);
  MT_CHECK(s.work != nullptr, "graph capture: '{}' recorded outside a capture", name);
  s.work->nodes.push_back({name, std::move(run)});
}

void replay(const CapturedWork& work) {
  for (const CapturedWork::Node& node : work.nodes) node.run();
}

}  // namespace mt::simulator
