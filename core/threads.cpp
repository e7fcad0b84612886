#include "core/threads.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace mt {

int default_num_threads() {
  static const int threads = [] {
    const char* text = std::getenv("MT_NUM_THREADS");
    if (text == nullptr || *text == '\0') return std::max(1, omp_get_max_threads());
    int n = 0;
    const char* end = text + std::strlen(text);
    const auto [at, ec] = std::from_chars(text, end, n);
    MT_CHECK(ec == std::errc() && at == end && n >= 1, "MT_NUM_THREADS must be a whole number >= 1, got '{}'", text);
    return n;
  }();
  return threads;
}

namespace {
// OpenMP's own setting is per thread (an ICV of the calling thread), so the
// count lives here and every parallel region asks for it explicitly.
int& thread_setting() {
  static int threads = [] {
    const int n = default_num_threads();
    omp_set_num_threads(n);  // Eigen's GEMM reads omp_get_max_threads()
    return n;
  }();
  return threads;
}
}  // namespace

int num_threads() { return thread_setting(); }

void set_num_threads(int n) {
  MT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got {}", n);
  thread_setting() = n;
  omp_set_num_threads(n);
}

ThreadTuner::ThreadTuner(int max_threads) : restore_threads_(num_threads()) {
  MT_CHECK(max_threads >= 1, "ThreadTuner: need at least 1 thread, got {}", max_threads);
  for (int n = 1; n < max_threads; n *= 2) candidates_.push_back(n);
  candidates_.push_back(max_threads);
  trial_medians_.assign(candidates_.size(), 0.0);
  start_window(0);
}

ThreadTuner::~ThreadTuner() { set_num_threads(restore_threads_); }

void ThreadTuner::start_window(size_t candidate) {
  current_ = candidate;
  set_num_threads(candidates_[current_]);
  window_.clear();
  window_seconds_ = 0;
  last_ = Clock::now();
}

void ThreadTuner::pause() { last_ = Clock::now(); }

bool ThreadTuner::window_full() const {
  return static_cast<int>(window_.size()) >= kTrialSteps && window_seconds_ >= kTrialSeconds;
}

double ThreadTuner::window_median() const {
  std::vector<double> sorted = window_;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

void ThreadTuner::step_finished() {
  const Clock::time_point now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - last_).count();
  record_step(seconds);
  last_ = now;
}

void ThreadTuner::record_step(double seconds) {
  if (candidates_.size() == 1) return;
  window_.push_back(seconds);
  window_seconds_ += seconds;
  if (!window_full()) return;
  if (trying_) {
    finish_trial();
    return;
  }
  const double median = window_median();
  ++kept_windows_;
  if (median > kSlowdown * winner_median_) last_winner_ = -1;  // the load changed: no doubling after this round
  if (kept_windows_ >= keep_windows_ || median > kSlowdown * winner_median_) {
    trying_ = true;
    start_window(0);
  } else {
    window_.clear();
    window_seconds_ = 0;
  }
}

void ThreadTuner::finish_trial() {
  trial_medians_[current_] = window_median();
  if (current_ + 1 < candidates_.size()) {
    start_window(current_ + 1);
  } else {
    finish_round();
  }
}

void ThreadTuner::finish_round() {
  const double best = *std::min_element(trial_medians_.begin(), trial_medians_.end());
  size_t winner = 0;
  while (trial_medians_[winner] > best * (1.0 + kTie)) ++winner;
  ++rounds_;
  trying_ = false;
  kept_windows_ = 0;
  const int winner_threads = candidates_[winner];
  keep_windows_ = winner_threads == last_winner_ ? std::min(2 * keep_windows_, kMaxKeepTrials) : kKeepTrials;
  last_winner_ = winner_threads;
  winner_median_ = trial_medians_[winner];
  start_window(winner);
}

}  // namespace mt
