#include "distributed/watchdog.h"

#include <fmt/format.h>

namespace mt::dist {

std::string collective_timeout_message(int rank, int world, const std::string& what, double timeout_seconds) {
  return fmt::format(
      "mixtape: rank {} of {}: {} did not complete within {:g} s (MT_DIST_TIMEOUT): another rank has stopped, "
      "died or is running a different collective; ending the job",
      rank, world, what, timeout_seconds);
}

CollectiveWatchdog::CollectiveWatchdog(Options options, FailureHandler on_failure, HealthCheck health)
    : options_(options), on_failure_(std::move(on_failure)), health_(std::move(health)) {
  MT_CHECK(on_failure_ != nullptr, "CollectiveWatchdog: no failure handler");
  MT_CHECK(options_.timeout_seconds > 0 && options_.poll.count() > 0,
           "CollectiveWatchdog: the timeout and the poll interval must be positive");
  thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::watch(std::shared_ptr<Work> work, std::string what) {
  const std::lock_guard lock(mutex_);
  watched_.push_back({std::move(work), std::move(what), std::chrono::steady_clock::now()});
}

size_t CollectiveWatchdog::in_flight() {
  const std::lock_guard lock(mutex_);
  return watched_.size();
}

bool CollectiveWatchdog::failed() {
  const std::lock_guard lock(mutex_);
  return failed_;
}

// Drops what has completed; the oldest collective past the timeout, or the
// back end's own error, is the failure.
std::string CollectiveWatchdog::check() {
  if (health_) {
    if (std::string error = health_(); !error.empty()) {
      return fmt::format("mixtape: rank {} of {}: {}; ending the job", options_.rank, options_.world, error);
    }
  }
  const std::lock_guard lock(mutex_);
  std::erase_if(watched_, [](const Watched& w) { return w.work->is_completed(); });
  const auto now = std::chrono::steady_clock::now();
  for (const Watched& w : watched_) {  // in the order issued: the first is the oldest
    if (std::chrono::duration<double>(now - w.since).count() > options_.timeout_seconds) {
      return collective_timeout_message(options_.rank, options_.world, w.what, options_.timeout_seconds);
    }
  }
  return {};
}

void CollectiveWatchdog::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (stop_cv_.wait_for(lock, options_.poll, [&] { return stopping_; })) return;
    }
    std::string failure = check();
    if (failure.empty()) continue;
    {
      const std::lock_guard lock(mutex_);
      failed_ = true;
    }
    on_failure_(failure);  // normally does not return (the process ends)
    return;
  }
}

}  // namespace mt::dist
