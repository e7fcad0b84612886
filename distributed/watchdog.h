// CollectiveWatchdog: makes sure a collective that never finishes ends the
// job instead of hanging it.
//
// The MPI back end polls its own collectives and needs no watchdog. NCCL's
// run on a GPU stream: once queued, the host never waits for them (Work::wait
// only makes a stream wait), so a rank that died or called a different
// collective would leave the others' GPUs spinning forever and their hosts
// blocked at the next synchronisation. The watchdog (as PyTorch's NCCL
// watchdog) is a thread that looks at every collective in flight a few
// times a second; one that has not completed within the timeout, or an
// error the back end reports on its own (`health`: ncclCommGetAsyncError),
// is handed once to `on_failure` with a message naming it, this rank and
// the timeout. The back end's handler aborts the communicator and ends the
// process, and the launcher (mpirun) then stops the other ranks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"

namespace mt::dist {

class CollectiveWatchdog {
 public:
  using FailureHandler = std::function<void(const std::string& message)>;
  using HealthCheck = std::function<std::string()>;  // empty while healthy, else what went wrong

  struct Options {
    double timeout_seconds = 300;
    std::chrono::milliseconds poll{100};
    int rank = 0, world = 1;  // for the messages
  };

  CollectiveWatchdog(Options options, FailureHandler on_failure, HealthCheck health = {});
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Watches `work` (kept alive until it completes) until it completes.
  // `what` names it in the message: "all_reduce of 1024 f32 elements".
  void watch(std::shared_ptr<Work> work, std::string what);
  size_t in_flight();  // watched and not yet seen complete
  bool failed();       // on_failure has been called (it is called once)

 private:
  struct Watched {
    std::shared_ptr<Work> work;
    std::string what;
    std::chrono::steady_clock::time_point since;
  };
  void run();
  std::string check();  // the failure's message, or empty

  Options options_;
  FailureHandler on_failure_;
  HealthCheck health_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  std::vector<Watched> watched_;
  bool stopping_ = false;
  bool failed_ = false;
  std::thread thread_;
};

// The message every back end gives for a collective past MT_DIST_TIMEOUT.
std::string collective_timeout_message(int rank, int world, const std::string& what, double timeout_seconds);

}  // namespace mt::dist
