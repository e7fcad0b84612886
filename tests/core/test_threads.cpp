// The thread setting and the ThreadTuner's choices, driven by step times the
// test makes up (a cost per thread count), so nothing here is timed.
#include <catch2/catch.hpp>
#include <functional>

#include "runtime/error.h"
#include "core/threads.h"

using namespace mt;

namespace {

// Feeds `steps` steps whose duration depends on the tuner's current count.
void run_steps(ThreadTuner& tuner, int steps, const std::function<double(int)>& seconds_for) {
  for (int i = 0; i < steps; ++i) tuner.record_step(seconds_for(tuner.threads()));
}

// Enough steps (of 10-30 ms) for one trial window of each count of a 2-thread tuner.
constexpr int kRoundSteps = 30;

}  // namespace

TEST_CASE("set_num_threads refuses zero and negative counts", "[threads]") {
  CHECK_THROWS_AS(set_num_threads(0), Error);
  CHECK_THROWS_AS(set_num_threads(-3), Error);
  const int before = num_threads();
  set_num_threads(3);
  CHECK(num_threads() == 3);
  set_num_threads(before);
}

TEST_CASE("ThreadTuner keeps the faster thread count (catches picking by order or by the last trial)", "[threads]") {
  const int before = num_threads();
  {
    ThreadTuner tuner(2);
    // A busy machine: two threads wait on each other, one thread runs free.
    run_steps(tuner, kRoundSteps, [](int t) { return t == 1 ? 0.010 : 0.030; });
    CHECK(tuner.rounds() == 1);
    CHECK(tuner.threads() == 1);
    CHECK(num_threads() == 1);
  }
  CHECK(num_threads() == before);  // restored
  {
    ThreadTuner tuner(2);
    run_steps(tuner, kRoundSteps, [](int t) { return t == 1 ? 0.020 : 0.011; });
    CHECK(tuner.rounds() == 1);
    CHECK(tuner.threads() == 2);
    CHECK(num_threads() == 2);
  }
}

TEST_CASE("ThreadTuner breaks near-ties toward fewer threads", "[threads]") {
  ThreadTuner tuner(2);
  run_steps(tuner, kRoundSteps, [](int t) { return t == 1 ? 0.0100 : 0.0099; });
  CHECK(tuner.rounds() == 1);
  CHECK(tuner.threads() == 1);
}

TEST_CASE("ThreadTuner tries 1, 2, 4 and the maximum", "[threads]") {
  ThreadTuner tuner(6);
  std::vector<int> tried;
  for (int i = 0; i < 200 && tuner.rounds() == 0; ++i) {
    if (tried.empty() || tried.back() != tuner.threads()) tried.push_back(tuner.threads());
    tuner.record_step(tuner.threads() == 4 ? 0.005 : 0.010);
  }
  CHECK(tried == std::vector<int>{1, 2, 4, 6});
  CHECK(tuner.threads() == 4);
}

namespace {

// Steps until the tuner finishes its next round (at most `limit`).
int steps_to_next_round(ThreadTuner& tuner, int limit, const std::function<double(int)>& seconds_for) {
  const int rounds = tuner.rounds();
  int steps = 0;
  while (tuner.rounds() == rounds && steps < limit) {
    tuner.record_step(seconds_for(tuner.threads()));
    ++steps;
  }
  return steps;
}

}  // namespace

TEST_CASE("ThreadTuner starts a new round as soon as the winner slows down (load arrived)", "[threads]") {
  ThreadTuner tuner(2);
  steps_to_next_round(tuner, 100, [](int t) { return t == 1 ? 0.020 : 0.010; });
  REQUIRE(tuner.threads() == 2);
  // Another process takes a core: two threads become slow, one thread is unaffected.
  const int steps = steps_to_next_round(tuner, 1000, [](int t) { return t == 1 ? 0.020 : 0.060; });
  // One slow window of the winner (3 steps), then a trial of each count (6 + 3).
  CHECK(steps <= 15);
  CHECK(tuner.rounds() == 2);
  CHECK(tuner.threads() == 1);
}

TEST_CASE("ThreadTuner tries again after kKeepTrials windows, so a core that frees up is used", "[threads]") {
  ThreadTuner tuner(2);
  steps_to_next_round(tuner, 100, [](int t) { return t == 1 ? 0.020 : 0.060; });
  REQUIRE(tuner.threads() == 1);
  // The load leaves: two threads are now faster, but the 1-thread winner
  // does not slow down, so only the periodic round notices.
  const int steps = steps_to_next_round(tuner, 1000, [](int t) { return t == 1 ? 0.020 : 0.011; });
  // kKeepTrials windows of 5-6 steps of 20 ms, then the trials (6 + 10 steps).
  CHECK(steps >= 5 * ThreadTuner::kKeepTrials);
  CHECK(steps <= 6 * ThreadTuner::kKeepTrials + 20);
  CHECK(tuner.threads() == 2);
}

TEST_CASE("ThreadTuner spaces out rounds that keep confirming the same winner", "[threads]") {
  ThreadTuner tuner(2);
  auto busy = [](int t) { return t == 1 ? 0.020 : 0.060; };
  steps_to_next_round(tuner, 100, busy);
  const int first = steps_to_next_round(tuner, 10000, busy);
  const int second = steps_to_next_round(tuner, 10000, busy);
  const int third = steps_to_next_round(tuner, 10000, busy);
  CHECK(tuner.threads() == 1);
  // Each stretch is kKeepTrials, 2x, 4x ... windows of the winner plus one round of trials.
  CHECK(second > first * 3 / 2);
  CHECK(third > second * 3 / 2);
  for (int i = 0; i < 10; ++i) steps_to_next_round(tuner, 100000, busy);
  const int capped = steps_to_next_round(tuner, 100000, busy);
  CHECK(capped <= 6 * ThreadTuner::kMaxKeepTrials + 20);
}

TEST_CASE("a one-thread ThreadTuner runs no trials", "[threads]") {
  ThreadTuner tuner(1);
  run_steps(tuner, 100, [](int) { return 0.01; });
  CHECK(tuner.rounds() == 0);
  CHECK(tuner.threads() == 1);
  CHECK_THROWS_AS(ThreadTuner(0), Error);
}
