// Own-kernel checks in child processes (kernel_verification.h).
#include "tools/train/kernel_verification.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"

extern char** environ;

namespace mt::tools {

using kernels::verify::CheckOutcome;
using kernels::verify::CheckResult;
using kernels::verify::OwnFamily;

namespace {

double timeout_from_environment(double fallback) {
  const char* value = std::getenv("MT_KERNEL_CHECK_TIMEOUT_S");
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  MT_CHECK(end != value && *end == '\0' && seconds > 0 && seconds <= 3600,
           "MT_KERNEL_CHECK_TIMEOUT_S='{}': expected seconds in (0, 3600]", value);
  return seconds;
}

// The pipe's ends, closed when they go out of scope.
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int ends[2];
    MT_CHECK(::pipe2(ends, O_CLOEXEC) == 0, "kernel verification: pipe: {}", std::strerror(errno));
    read = ends[0];
    write = ends[1];
  }
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ChildOutput run_child(const std::vector<std::string>& argv, double timeout_seconds) {
  MT_CHECK(!argv.empty(), "kernel verification: no command to run");
  Pipe pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe.write, STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  MT_CHECK(spawned == 0, "kernel verification: cannot start {}: {}", argv[0], std::strerror(spawned));
  ::close(pipe.write);
  pipe.write = -1;

  ChildOutput result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd fd{pipe.read, POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(pipe.read, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output: the child is exiting
    result.out.append(buffer, static_cast<size_t>(n));
  }
  if (result.timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_status = result.timed_out ? -1 : exit_status_of(status);
  return result;
}

CheckResult check_in_child(OwnFamily family, Device device, const VerificationOptions& options) {
  const double timeout = timeout_from_environment(options.timeout_seconds);
  const auto start = std::chrono::steady_clock::now();
  CheckResult result;
  result.family = family;
  const ChildOutput child = run_child({options.executable, "info", "--check-family",
                                       kernels::verify::family_info(family).name, "--device", device.str()},
                                      timeout);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (child.timed_out) {
    result.outcome = CheckOutcome::TimedOut;
    result.detail = fmt::format("timed out after {:g} s (killed)", timeout);
    return result;
  }
  // The child's last line is its result; a crash leaves none.
  std::string last;
  std::stringstream lines(child.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  const nlohmann::json reply = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  const bool readable = child.exit_status == 0 && reply.is_object() &&
                        reply.value("family", "") == kernels::verify::family_info(family).name &&
                        reply.contains("outcome") && reply["outcome"].is_string() &&
                        kernels::verify::outcome_named(reply["outcome"].get<std::string>()).has_value();
  if (!readable) {
    result.outcome = CheckOutcome::Failed;
    result.detail = child.exit_status > 128
                        ? fmt::format("the check's process died (signal {})", child.exit_status - 128)
                        : fmt::format("the check's process exited with {} and no result", child.exit_status);
    return result;
  }
  result.outcome = *kernels::verify::outcome_named(reply["outcome"].get<std::string>());
  result.detail = reply.value("detail", "");
  return result;
}

std::vector<CheckResult> verify_families(Device device, const VerificationOptions& options) {
  std::vector<CheckResult> results;
  for (const auto& f : kernels::verify::own_families()) results.push_back(check_in_child(f.family, device, options));
  if (const auto identity = kernels::verify::identity_for(device)) kernels::verify::store_results(*identity, results);
  return results;
}

std::string verification_table(Device device, const std::vector<CheckResult>& results) {
  const auto identity = kernels::verify::identity_for(device);
  std::string table =
      fmt::format("kernel verification on {}{}\n", device.str(),
                  identity ? fmt::format(" = {}, kernels {} (results stored in {})", identity->description(),
                                         identity->kernels_build, kernels::verify::check_cache_file().string())
                           : " (the simulator: CI's own tests; `auto` uses every family here, results are not stored)");
  table += fmt::format("  {:<13} {:<15} {:>8}  {}\n", "family", "check", "time", "auto uses");
  for (const CheckResult& r : results) {
    const auto& f = kernels::verify::family_info(r.family);
    const std::string uses = r.outcome == CheckOutcome::Verified ? std::string("own: ") + f.name
                             : r.outcome == CheckOutcome::NotApplicable
                                 ? std::string("-")
                                 : "fell back: " + kernels::verify::fallback_on(r.family, device);
    table += fmt::format("  {:<13} {:<15} {:>6.1f} s  {}\n", f.name, kernels::verify::outcome_name(r.outcome),
                         r.seconds, uses);
    if (r.outcome == CheckOutcome::Failed || r.outcome == CheckOutcome::TimedOut) {
      table += fmt::format("  {:<13} {}\n", "", r.detail);
    }
  }
  return table;
}

namespace {

// MT_KERNEL_CHECKS: on (or unset) or off.
bool checks_enabled() {
  const char* value = std::getenv("MT_KERNEL_CHECKS");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "on") == 0) return true;
  MT_CHECK(std::strcmp(value, "off") == 0, "MT_KERNEL_CHECKS='{}': expected on or off", value);
  return false;
}

}  // namespace

void check_verification_settings() {
  checks_enabled();
  timeout_from_environment(1);
  kernels::verify::identity_for(kSIM);
}

void verify_missing_families(Device device, const VerificationOptions& options) {
  if (!checks_enabled()) return;
  const auto identity = kernels::verify::identity_for(device);
  if (!identity) return;
  const auto cached = kernels::verify::cached_results(*identity);
  std::vector<CheckResult> results;
  for (const auto& f : kernels::verify::own_families()) {
    if (cached.count(f.family) > 0) continue;
    if (results.empty()) {
      spdlog::info(
          "checking mixtape's own kernels on {} = {} (once per GPU, driver and build; each in a child process)",
          device.str(), identity->description());
    }
    results.push_back(check_in_child(f.family, device, options));
    const CheckResult& r = results.back();
    const std::string line =
        fmt::format("kernel check {}: {} in {:.1f} s", f.name, kernels::verify::outcome_name(r.outcome), r.seconds);
    if (r.outcome == CheckOutcome::Failed || r.outcome == CheckOutcome::TimedOut) {
      spdlog::warn("{} ({}): `auto` uses {} instead", line, r.detail, kernels::verify::fallback_on(f.family, device));
    } else {
      spdlog::info("{}", line);
    }
  }
  if (!results.empty()) kernels::verify::store_results(*identity, results);
}

}  // namespace mt::tools
