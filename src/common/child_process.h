#pragma once

// ChildProcess: one child started with posix_spawn and held by a pidfd, so
// its exit is an event (the pidfd turns readable) rather than something to
// poll for, and its pid cannot be reused under us before we reap it.
// RunCommand: run a short command to completion and capture its output.
//
// The child starts with an empty signal mask and default dispositions: the
// binaries block SIGTERM/SIGINT for ShutdownSignals, and a blocked mask
// survives exec, which would make the child deaf to the signals that stop it.
//
// Ownership: owns the pid (until reaped), the pidfd and the read end of the
// output pipe. Destroying a child that still runs kills it with SIGKILL and
// reaps it: a ChildProcess never leaves a zombie or an orphan behind.
// Movable, not copyable. Thread-compatible (caller synchronizes).

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::common {

struct SpawnOptions {
  // argv[0] without '/' is looked up in PATH. Must not be empty.
  std::vector<std::string> argv{};
  // Extra "KEY=value" entries on top of this process' environment (a later
  // entry for the same key wins).
  std::vector<std::string> extra_env{};
  // Capture stdout and stderr together into a pipe read through output_fd();
  // otherwise the child shares this process' stdout and stderr.
  bool capture_output = false;
};

// How a child ended, from waitid().
struct ExitInfo {
  bool signaled = false;  // killed by `code`, else exited with `code`
  int code = 0;
  bool success() const { return !signaled && code == 0; }
  // "exit code 3" / "signal 9 (Killed)", for logs.
  std::string ToString() const;
};

class ChildProcess {
 public:
  // Errors: errno-mapped from pipe/posix_spawn/pidfd_open (kNotFound when the
  // binary does not exist), kInvalidArgument for an empty argv.
  static StatusOr<ChildProcess> Spawn(const SpawnOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // SIGKILL and reap when still running.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Readable once the child has exited (for poll()).
  int pidfd() const { return pidfd_.get(); }
  // The captured output's read end; -1 without capture_output.
  int output_fd() const { return output_.get(); }
  // True until the child has been reaped by TryWait/WaitUntil.
  bool running() const { return pid_ > 0; }

  // Sends `signal_number`. Not an error after the child exited (not yet
  // reaped: the signal goes nowhere). kFailedPrecondition once reaped.
  Status Signal(int signal_number);

  // Reaps the child if it has exited; nullopt while it still runs.
  std::optional<ExitInfo> TryWait();
  // Waits for the exit until `deadline`; nullopt when it still runs then.
  std::optional<ExitInfo> WaitUntil(std::chrono::steady_clock::time_point deadline);

  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns how it ended.
  ExitInfo Terminate(std::chrono::milliseconds grace);

 private:
  ChildProcess(pid_t pid, UniqueFd pidfd, UniqueFd output)
      : pid_(pid), pidfd_(std::move(pidfd)), output_(std::move(output)) {}
  void KillAndReap();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd output_;
};

// What a finished command printed (stdout and stderr interleaved) and how it
// ended.
struct CommandOutput {
  ExitInfo exit;
  std::string output;
};

// Runs argv to completion, capturing its output. Past `timeout` (or when
// `stop` is requested) the command is killed: kDeadlineExceeded (kCancelled).
// Spawn errors as ChildProcess::Spawn. A non-zero exit is not an error: the
// caller reads `exit`.
StatusOr<CommandOutput> RunCommand(const SpawnOptions& options, std::chrono::milliseconds timeout,
                                   std::stop_token stop = {});

}  // namespace nvdra::common
