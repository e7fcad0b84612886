// CollectiveWatchdog: what keeps a hung NCCL collective (the host never
// waits for one) from hanging the job. Fed collectives that complete when
// the test says so, so nothing here needs a GPU or a second rank.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "distributed/watchdog.h"

using namespace mt;
using Catch::Contains;
using namespace std::chrono_literals;

namespace {

class ManualWork final : public dist::Work {
 public:
  void wait() override {}
  bool is_completed() override { return done; }
  std::atomic<bool> done{false};
};

struct Failures {
  std::mutex mutex;
  std::vector<std::string> messages;
  void add(const std::string& m) {
    const std::lock_guard lock(mutex);
    messages.push_back(m);
  }
  size_t count() {
    const std::lock_guard lock(mutex);
    return messages.size();
  }
};

// Polls `condition` for up to 20 s (a bound on a hang, not a speed target).
template <typename Condition>
bool eventually(Condition&& condition) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

}  // namespace

// The bug: a watchdog that fires on collectives that did complete (killing
// healthy long runs), or one that never lets go of them.
TEST_CASE("the watchdog lets collectives that complete go, however many", "[dist][watchdog]") {
  Failures failures;
  // A second: a busy CI machine may pause this thread for a while between
  // watching the collectives and completing them.
  dist::CollectiveWatchdog dog({.timeout_seconds = 1.0, .poll = 10ms, .rank = 1, .world = 2},
                               [&](const std::string& m) { failures.add(m); });
  std::vector<std::shared_ptr<ManualWork>> works;
  for (int i = 0; i < 50; ++i) {
    works.push_back(std::make_shared<ManualWork>());
    dog.watch(works.back(), "all_reduce");
  }
  CHECK(dog.in_flight() == 50);
  for (auto& w : works) w->done = true;
  CHECK(eventually([&] { return dog.in_flight() == 0; }));
  std::this_thread::sleep_for(1100ms);  // past the timeout: nothing left to fire on
  CHECK(failures.count() == 0);
  CHECK(!dog.failed());
}

// The bug this exists for: a rank whose peer died waits on the GPU forever.
TEST_CASE("a collective past the timeout is reported once, naming it, the rank and the timeout", "[dist][watchdog]") {
  Failures failures;
  dist::CollectiveWatchdog dog({.timeout_seconds = 0.2, .poll = 10ms, .rank = 1, .world = 2},
                               [&](const std::string& m) { failures.add(m); });
  auto finished = std::make_shared<ManualWork>();
  finished->done = true;
  dog.watch(finished, "broadcast of 4 f32 elements");
  dog.watch(std::make_shared<ManualWork>(), "all_reduce of 1024 f32 elements (NCCL, cuda:0)");
  dog.watch(std::make_shared<ManualWork>(), "all_gather of 8 i64 elements (NCCL, cuda:0)");
  REQUIRE(eventually([&] { return failures.count() > 0; }));
  std::this_thread::sleep_for(100ms);
  REQUIRE(failures.count() == 1);  // once: the process ends there
  CHECK(dog.failed());
  CHECK_THAT(failures.messages[0], Contains("rank 1 of 2") && Contains("all_reduce of 1024 f32 elements") &&
                                       Contains("did not complete within 0.2 s (MT_DIST_TIMEOUT)") &&
                                       !Contains("all_gather"));
}

// The bug: an error NCCL reports asynchronously (a peer's connection gone)
// ignored until the timeout, minutes later.
TEST_CASE("an error the back end reports on its own fails at once", "[dist][watchdog]") {
  Failures failures;
  std::atomic<bool> broken{false};
  dist::CollectiveWatchdog dog(
      {.timeout_seconds = 3600, .poll = 10ms, .rank = 0, .world = 4}, [&](const std::string& m) { failures.add(m); },
      [&]() -> std::string { return broken ? "NCCL reported an error: remote process exited" : ""; });
  dog.watch(std::make_shared<ManualWork>(), "all_reduce");
  std::this_thread::sleep_for(50ms);
  CHECK(failures.count() == 0);
  broken = true;
  REQUIRE(eventually([&] { return failures.count() > 0; }));
  CHECK_THAT(failures.messages[0], Contains("rank 0 of 4") && Contains("remote process exited"));
  CHECK_THROWS_WITH(dist::CollectiveWatchdog({.timeout_seconds = 0}, [](const std::string&) {}),
                    Contains("must be positive"));
}
