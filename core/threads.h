// How many CPU threads mixtape's kernels use, and a tuner that picks that
// number by measurement while training.
//
// Why a tuner: a parallel region waits at its end for its slowest thread. On
// a machine whose cores are taken by other processes (a build, another
// training run), one of the threads is often not running, and every region
// then waits a scheduler time slice for it. A training step runs hundreds of
// regions, so two threads on two busy cores fell to 6% of their quiet
// throughput (bf16 mlp, 28.6k -> 1.7k samples/s) while one thread kept 20.7k
// (measured 2026-12-01, bench/cpu_busy_machine.sh). Waiting passively
// (OMP_WAIT_POLICY=passive) made it worse: a sleeping thread must win a core
// back before the region can end. No static rule knows the load, so the
// tuner times training steps with each candidate thread count now and then
// and keeps the fastest.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace mt {

// The threads a parallel CPU kernel may use now (OpenMP's and Eigen's
// limit). Starts at default_num_threads().
int num_threads();
// Sets it (n >= 1); mt::Error otherwise.
void set_num_threads(int n);
// MT_NUM_THREADS when set (a whole number >= 1, else mt::Error), otherwise
// OpenMP's default (OMP_NUM_THREADS, or the cores this process may run on).
int default_num_threads();

// Picks the thread count for a training loop by timing its steps. Call
// step_finished() after each step and pause() after work that is not a step
// (evaluation, checkpoints); the time since the last call is then not
// counted. It sets mt::set_num_threads() as it goes and restores the count
// it found when destroyed.
//
// Rounds: each candidate count (1, 2, 4, ... up to max_threads, and
// max_threads) runs a trial window (at least kTrialSteps steps and
// kTrialSeconds); the fastest by median step time is kept (the fewest
// threads among those within kTie of it, since fewer threads also spare the
// machine). The winner then runs for kKeepTrials trial lengths before the
// next round, or until its step time grows by kSlowdown (load arrived).
// Each round that confirms the same winner doubles that stretch, up to
// kMaxKeepTrials, since every round also spends a window on the slower
// counts (on a busy machine 1 round in 20 windows cost ~10% of throughput).
class ThreadTuner {
 public:
  static constexpr int kTrialSteps = 3;
  static constexpr double kTrialSeconds = 0.1;
  static constexpr double kTie = 0.03;
  static constexpr int kKeepTrials = 20;
  static constexpr int kMaxKeepTrials = 320;
  static constexpr double kSlowdown = 1.5;

  explicit ThreadTuner(int max_threads = default_num_threads());
  ~ThreadTuner();
  ThreadTuner(const ThreadTuner&) = delete;
  ThreadTuner& operator=(const ThreadTuner&) = delete;

  void step_finished();
  // As step_finished(), for a step whose duration the caller measured (tests).
  void record_step(double seconds);
  void pause();
  int threads() const { return candidates_[current_]; }
  int rounds() const { return rounds_; }  // trial rounds finished so far

 private:
  using Clock = std::chrono::steady_clock;
  bool window_full() const;
  double window_median() const;
  void start_window(size_t candidate);
  void finish_trial();
  void finish_round();

  std::vector<int> candidates_;
  std::vector<double> trial_medians_;  // seconds per step, per candidate, this round
  size_t current_ = 0;
  bool trying_ = true;  // in a trial round (else keeping the winner)
  int rounds_ = 0;
  int restore_threads_;
  double winner_median_ = 0;
  int kept_windows_ = 0;
  int keep_windows_ = kKeepTrials;  // this round's stretch
  int last_winner_ = -1;
  std::vector<double> window_;  // step times of the current window
  double window_seconds_ = 0;
  Clock::time_point last_;
};

}  // namespace mt
