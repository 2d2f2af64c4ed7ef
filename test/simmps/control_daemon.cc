#include "control_daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"
#include "control_log.h"
#include "control_wire.h"
#include "mps_settings.h"

namespace nvdra::simmps {
namespace {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;
using common::UniqueFd;

// The real daemon's words; scripts may look for them.
constexpr std::string_view kAlreadyRunning = "An instance of this daemon is already running";

std::string_view Trim(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

// Replaces `path` by a file holding `content`: written beside it, then renamed
// over it, so a reader sees the old file or the new one, never a part.
Status WriteFileAtomically(const fs::path& path, std::string_view content) {
  const fs::path temp = path.parent_path() / fmt::format(".{}.tmp.{}", path.filename().string(),
                                                         ::getpid());
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return common::ErrnoToStatus(errno, "open " + temp.string());
  while (!content.empty()) {
    const ssize_t n = ::write(fd.get(), content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::unlink(temp.c_str());
      return common::ErrnoToStatus(saved, "write " + temp.string());
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  fd.Reset();
  if (::rename(temp.c_str(), path.c_str()) < 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    return common::ErrnoToStatus(saved, "rename to " + path.string());
  }
  return common::OkStatus();
}

std::string StateFileContent(const MpsSettings& settings) {
  return settings.ToStateJson().dump(2) + "\n";
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

struct Session {
  UniqueFd fd;
  std::string input;  // bytes after the last complete line
};

class ControlDaemon {
 public:
  // Takes the pipe folder (lock, socket, pid file) and writes the first log
  // lines and the state file. The caller has blocked StopSignals().
  static StatusOr<std::unique_ptr<ControlDaemon>> Start(const DaemonOptions& options);

  ControlDaemon(const ControlDaemon&) = delete;
  ControlDaemon& operator=(const ControlDaemon&) = delete;

  // Answers clients until `quit` or a stop signal; returns the exit status.
  int Serve();

 private:
  ControlDaemon(MpsPaths paths, bool multi_user, UniqueFd lock, UniqueFd signals, ControlLog log)
      : paths_(std::move(paths)),
        settings_(multi_user),
        lock_(std::move(lock)),
        signals_(std::move(signals)),
        log_(std::move(log)) {}

  void AcceptClients();
  // Reads what a client sent and runs its complete lines; false when the
  // session is over (the client left, or its reply could not be sent).
  bool ReadFromClient(Session& session);
  bool RunCommand(Session& session, std::string_view raw_line);
  void WriteStateFile();
  // Removes the socket and the pid file and logs the shutdown; once.
  void Stop();

  const MpsPaths paths_;
  MpsSettings settings_;
  const UniqueFd lock_;  // flock()ed while we live
  const UniqueFd signals_;
  const ControlLog log_;
  UniqueFd listener_;
  ino_t socket_inode_ = 0;  // ours, so Stop() never removes another's socket
  std::vector<std::unique_ptr<Session>> sessions_;
  bool stopped_ = false;
};

StatusOr<std::unique_ptr<ControlDaemon>> ControlDaemon::Start(const DaemonOptions& options) {
  const MpsPaths& paths = options.paths;
  UniqueFd lock(::open(paths.lock_file().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) return common::ErrnoToStatus(errno, "open " + paths.lock_file().string());
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) return common::AlreadyExistsError(kAlreadyRunning);
    return common::ErrnoToStatus(errno, "flock " + paths.lock_file().string());
  }
  // A daemon that does not take our lock (the lock file was removed under it)
  // still answers on the socket: that is a live daemon too.
  if (ConnectControlSocket(paths.control_socket()).ok()) {
    return common::AlreadyExistsError(kAlreadyRunning);
  }

  sigset_t stop = StopSignals();
  UniqueFd signals(::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) return common::ErrnoToStatus(errno, "signalfd");
  auto log = ControlLog::Open(paths.control_log(), ::getpid());
  if (!log.ok()) return log.status();

  std::unique_ptr<ControlDaemon> daemon(new ControlDaemon(
      paths, options.multi_user, std::move(lock), std::move(signals), std::move(*log)));

  // Nobody listens (checked above, under the lock): a leftover of a daemon
  // that was killed. Replace it.
  if (::unlink(paths.control_socket().c_str()) < 0 && errno != ENOENT) {
    return common::ErrnoToStatus(errno, "remove stale " + paths.control_socket().string());
  }
  auto listener = ListenControlSocket(paths.control_socket());
  if (!listener.ok()) return listener.status();
  daemon->listener_ = std::move(*listener);
  struct stat socket_stat {};
  if (::lstat(paths.control_socket().c_str(), &socket_stat) == 0) {
    daemon->socket_inode_ = socket_stat.st_ino;
  }
  if (Status s = WriteFileAtomically(paths.pid_file(), fmt::format("{}\n", ::getpid())); !s.ok()) {
    ::unlink(paths.control_socket().c_str());
    return s;
  }
  daemon->log_.Write(
      fmt::format("Starting control daemon using socket {}", paths.control_socket().string()));
  daemon->log_.Write(fmt::format(
      "To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY={}",
      paths.pipe_dir.string()));
  if (Status s = WriteFileAtomically(paths.state_file(), StateFileContent(daemon->settings_));
      !s.ok()) {
    ::unlink(paths.control_socket().c_str());
    ::unlink(paths.pid_file().c_str());
    return s;
  }
  return daemon;
}

int ControlDaemon::Serve() {
  std::vector<pollfd> fds;
  while (!stopped_) {
    fds.clear();
    fds.push_back({signals_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    for (const auto& session : sessions_) fds.push_back({session->fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log_.Write(fmt::format("poll failed: {}", std::system_category().message(errno)));
      Stop();
      return 1;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(signals_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        log_.Write(fmt::format("Received signal {}", info.ssi_signo));
        Stop();
        break;
      }
    }
    // Backwards, so that erasing a finished session keeps the others' indices.
    for (std::size_t i = sessions_.size(); i-- > 0 && !stopped_;) {
      if (fds[2 + i].revents == 0) continue;
      if (!ReadFromClient(*sessions_[i])) {
        if (!stopped_) log_.Write("UI closed");
        sessions_.erase(sessions_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (!stopped_ && (fds[1].revents & POLLIN) != 0) AcceptClients();
  }
  return 0;
}

void ControlDaemon::AcceptClients() {
  for (;;) {
    // Blocking sockets: reads only follow poll(), and replies are a few bytes.
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: no one else waiting
    }
    // A client that never reads its replies must not stall the daemon forever.
    const timeval send_timeout{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    log_.Write("Accepting connection...");
    log_.Write("NEW UI");
    auto session = std::make_unique<Session>();
    session->fd = std::move(fd);
    sessions_.push_back(std::move(session));
  }
}

bool ControlDaemon::ReadFromClient(Session& session) {
  char chunk[4096];
  const ssize_t n = ::read(session.fd.get(), chunk, sizeof(chunk));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) {
    // A last command without its newline still counts (e.g. printf 'quit').
    if (!session.input.empty()) {
      const std::string line = std::move(session.input);
      session.input.clear();
      RunCommand(session, line);
    }
    return false;
  }
  session.input.append(chunk, static_cast<std::size_t>(n));
  std::size_t newline = 0;
  while (!stopped_ && (newline = session.input.find('\n')) != std::string::npos) {
    const std::string line = session.input.substr(0, newline);
    session.input.erase(0, newline + 1);
    if (!RunCommand(session, line)) return false;
  }
  if (session.input.size() > kMaxLineBytes) {
    const std::string message =
        fmt::format("Command longer than {} bytes; closing the connection", kMaxLineBytes);
    log_.Write(message);
    (void)SendAll(session.fd.get(), EncodeReply({message}));
    return false;
  }
  return !stopped_;
}

bool ControlDaemon::RunCommand(Session& session, std::string_view raw_line) {
  const std::string_view line = Trim(raw_line);
  if (line.empty()) return true;
  log_.Write(fmt::format("Cmd:{}", line));
  const CommandResult result = settings_.Execute(line);
  for (const auto& reply_line : result.reply) log_.Write(reply_line);
  if (result.changed) WriteStateFile();
  // Before the reply: when the client returns, the daemon's files are gone.
  if (result.quit) Stop();
  return SendAll(session.fd.get(), EncodeReply(result.reply)).ok();
}

void ControlDaemon::WriteStateFile() {
  if (Status s = WriteFileAtomically(paths_.state_file(), StateFileContent(settings_)); !s.ok()) {
    log_.Write(fmt::format("Could not write {}: {}", paths_.state_file().string(), s.ToString()));
  }
}

void ControlDaemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  struct stat socket_stat {};
  if (::lstat(paths_.control_socket().c_str(), &socket_stat) == 0 &&
      socket_stat.st_ino == socket_inode_) {
    ::unlink(paths_.control_socket().c_str());
  }
  ::unlink(paths_.pid_file().c_str());
  listener_.Reset();
  log_.Write("Shutting down control daemon");
}

// Closes every descriptor above stderr except `keep`: a daemon must not hold
// its caller's pipes open (a caller reading our output would never see EOF).
void CloseInheritedDescriptors(int keep) {
  std::vector<int> inherited;
  if (DIR* dir = ::opendir("/proc/self/fd"); dir != nullptr) {
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(entry->d_name, &end, 10);
      if (*end == '\0' && end != entry->d_name && fd > 2 && fd != keep && fd != own) {
        inherited.push_back(static_cast<int>(fd));
      }
    }
    ::closedir(dir);
  } else {
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != keep) inherited.push_back(fd);
    }
  }
  for (int fd : inherited) ::close(fd);
}

// Detaches stdin, stdout and stderr from the caller. Under `chroot <driver
// root>` there may be no /dev/null (mock driver roots have placeholder files
// in dev/); then a pipe of our own stands in: stdin never has data, and
// writes fill a buffer nobody reads and then fail (non-blocking).
void DetachStdio() {
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
    return;
  }
  int sink[2];
  if (::pipe2(sink, O_CLOEXEC | O_NONBLOCK) < 0) {
    for (int fd = 0; fd <= 2; ++fd) ::close(fd);
    return;
  }
  ::dup2(sink[0], 0);
  ::dup2(sink[1], 1);
  ::dup2(sink[1], 2);
  if (sink[0] > 2) ::close(sink[0]);
  if (sink[1] > 2) ::close(sink[1]);
}

int ReportStartFailure(const Status& status) {
  if (status.code() == common::StatusCode::kAlreadyExists) {
    fmt::print(stderr, "{}\n", status.message());
  } else {
    fmt::print(stderr, "nvidia-cuda-mps-control: {}\n", status.ToString());
  }
  std::fflush(stderr);
  return 1;
}

}  // namespace

int RunControlDaemon(const DaemonOptions& options) {
  for (const fs::path& dir : {options.paths.pipe_dir, options.paths.log_dir}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      fmt::print(stderr, "nvidia-cuda-mps-control: cannot create {}: {}\n", dir.string(),
                 ec.message());
      return 1;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  const sigset_t stop = StopSignals();

  if (!options.background) {
    ::sigprocmask(SIG_BLOCK, &stop, nullptr);
    auto daemon = ControlDaemon::Start(options);
    if (!daemon.ok()) return ReportStartFailure(daemon.status());
    return (*daemon)->Serve();
  }

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) < 0) {
    fmt::print(stderr, "nvidia-cuda-mps-control: pipe: {}\n",
               std::system_category().message(errno));
    return 1;
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    fmt::print(stderr, "nvidia-cuda-mps-control: fork: {}\n",
               std::system_category().message(errno));
    return 1;
  }
  if (child > 0) {
    // The caller: wait for "listening" (one byte) or the child's failure.
    ::close(ready[1]);
    char byte = 0;
    ssize_t n = 0;
    do {
      n = ::read(ready[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    ::close(ready[0]);
    if (n == 1) return 0;
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
    return 1;
  }

  // The daemon. Errors until the byte is sent still reach the caller's stderr.
  // No setsid(), unlike the real daemon: see "Process group" in the header.
  ::close(ready[0]);
  CloseInheritedDescriptors(ready[1]);
  ::signal(SIGHUP, SIG_IGN);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  auto daemon = ControlDaemon::Start(options);
  if (!daemon.ok()) return ReportStartFailure(daemon.status());
  DetachStdio();
  // The folders are absolute (MpsPaths): leave the caller's folder, so the
  // daemon does not keep a mount busy.
  if (::chdir("/") < 0) {
    // Harmless: every path we use is absolute.
  }
  const char byte = '1';
  while (::write(ready[1], &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(ready[1]);
  return (*daemon)->Serve();
}

}  // namespace nvdra::simmps
