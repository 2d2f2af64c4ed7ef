#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <utility>

#include <fmt/format.h>

extern char** environ;

namespace nvdra::common {
namespace {

using Clock = std::chrono::steady_clock;

// This process' environment with `extra` layered on top, as KEY=value.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> by_key;
  std::vector<std::string> order;
  auto put = [&](const std::string& entry) {
    const std::string key = entry.substr(0, entry.find('='));
    if (!by_key.contains(key)) order.push_back(key);
    by_key[key] = entry;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) put(*e);
  for (const std::string& entry : extra) put(entry);
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const std::string& key : order) out.push_back(by_key[key]);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Spawn attributes that reset the mask and dispositions, released by RAII.
class SpawnAttr {
 public:
  SpawnAttr() {
    posix_spawnattr_init(&attr_);
    sigset_t empty;
    sigemptyset(&empty);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr_, &empty);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr_); }
  SpawnAttr(const SpawnAttr&) = delete;
  SpawnAttr& operator=(const SpawnAttr&) = delete;
  posix_spawnattr_t* get() { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

class FileActions {
 public:
  FileActions() { posix_spawn_file_actions_init(&actions_); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

ExitInfo FromSiginfo(const siginfo_t& info) {
  ExitInfo exit;
  exit.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  exit.code = info.si_status;
  return exit;
}

}  // namespace

std::string ExitInfo::ToString() const {
  if (signaled) return fmt::format("signal {} ({})", code, strsignal(code));
  return fmt::format("exit code {}", code);
}

StatusOr<ChildProcess> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgumentError("spawn: empty command line");
  const std::string& binary = options.argv.front();
  FileActions actions;
  UniqueFd read_end;
  UniqueFd write_end;
  if (options.capture_output) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe for " + binary);
    read_end.Reset(fds[0]);
    write_end.Reset(fds[1]);
    posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDERR_FILENO);
  }
  std::vector<std::string> argv = options.argv;
  std::vector<std::string> env = MergedEnvironment(options.extra_env);
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(env);
  SpawnAttr attr;
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, binary.c_str(), actions.get(), attr.get(), c_argv.data(), c_env.data());
  if (rc != 0) return ErrnoToStatus(rc, "spawn " + binary);
  write_end.Reset();  // only the child writes
  // Not yet reaped, so `pid` cannot name another process here.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return ErrnoToStatus(err, "pidfd_open for " + binary);
  }
  return ChildProcess(pid, UniqueFd(pidfd), std::move(read_end));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), pidfd_(std::move(other.pidfd_)), output_(std::move(other.output_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    output_ = std::move(other.output_);
  }
  return *this;
}

ChildProcess::~ChildProcess() { KillAndReap(); }

void ChildProcess::KillAndReap() {
  if (pid_ <= 0) return;
  syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  siginfo_t info{};
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Status ChildProcess::Signal(int signal_number) {
  if (pid_ <= 0) return FailedPreconditionError("signal: the child was already reaped");
  // pidfd_send_signal cannot hit a recycled pid; ESRCH means exited, not reaped.
  if (syscall(SYS_pidfd_send_signal, pidfd_.get(), signal_number, nullptr, 0) != 0 && errno != ESRCH) {
    return ErrnoToStatus(errno, fmt::format("signal {} to pid {}", signal_number, pid_));
  }
  return OkStatus();
}

std::optional<ExitInfo> ChildProcess::TryWait() {
  if (pid_ <= 0) return std::nullopt;
  siginfo_t info{};
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG) != 0) return std::nullopt;
  if (info.si_pid == 0) return std::nullopt;  // still running
  pid_ = -1;
  return FromSiginfo(info);
}

std::optional<ExitInfo> ChildProcess::WaitUntil(Clock::time_point deadline) {
  while (pid_ > 0) {
    if (std::optional<ExitInfo> exit = TryWait()) return exit;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{pidfd_.get(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(left.count()) + 1);
  }
  return std::nullopt;
}

ExitInfo ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return ExitInfo{};
  (void)Signal(SIGTERM);
  if (std::optional<ExitInfo> exit = WaitUntil(Clock::now() + grace)) return *exit;
  (void)Signal(SIGKILL);
  siginfo_t info{};
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 && errno == EINTR) {
  }
  pid_ = -1;
  return FromSiginfo(info);
}

StatusOr<CommandOutput> RunCommand(const SpawnOptions& options, std::chrono::milliseconds timeout,
                                   std::stop_token stop) {
  SpawnOptions capture = options;
  capture.capture_output = true;
  ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(capture));
  const auto deadline = Clock::now() + timeout;
  CommandOutput result;
  // Read until EOF (every writer, the child's descendants included, closed
  // the pipe), then reap; polling in slices so a stop request is seen.
  bool eof = false;
  while (!eof) {
    if (stop.stop_requested()) return CancelledError(options.argv.front() + ": cancelled");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return DeadlineExceededError(fmt::format("{}: no exit within {} ms", options.argv.front(), timeout.count()));
    }
    pollfd p{child.output_fd(), POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 100)));
    if (n < 0 && errno != EINTR) return ErrnoToStatus(errno, "poll output of " + options.argv.front());
    if (n <= 0) continue;
    char buffer[4096];
    const ssize_t got = read(child.output_fd(), buffer, sizeof buffer);
    if (got > 0) {
      result.output.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      eof = true;
    }
  }
  std::optional<ExitInfo> exit = child.WaitUntil(deadline);
  if (!exit) {
    return DeadlineExceededError(fmt::format("{}: no exit within {} ms", options.argv.front(), timeout.count()));
  }
  result.exit = *exit;
  return result;
}

}  // namespace nvdra::common
