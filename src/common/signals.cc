#include "common/signals.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/log.h"

namespace nvdra::common {
namespace {

std::atomic<bool> g_installed{false};

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void DefaultForceExit(int signal_number) {
  LOG_ERROR("second signal during shutdown, exiting now", {{"signal", signal_number}});
  FlushLogs();
  ::_exit(128 + signal_number);
}

}  // namespace

StatusOr<std::unique_ptr<ShutdownSignals>> ShutdownSignals::Install(ForceExit on_second_signal) {
  if (g_installed.exchange(true)) {
    return FailedPreconditionError("ShutdownSignals is already installed in this process");
  }
  const sigset_t set = ShutdownSet();
  sigset_t previous;
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &previous); rc != 0) {
    g_installed = false;
    return ErrnoToStatus(rc, "pthread_sigmask");
  }
  UniqueFd signal_fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd) {
    const int error = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    g_installed = false;
    return ErrnoToStatus(error, "signalfd");
  }
  UniqueFd wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd) {
    const int error = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    g_installed = false;
    return ErrnoToStatus(error, "eventfd");
  }
  if (!on_second_signal) on_second_signal = DefaultForceExit;
  return std::make_unique<ShutdownSignals>(InstallKey(), std::move(signal_fd), std::move(wake_fd),
                                           previous, std::move(on_second_signal));
}

ShutdownSignals::ShutdownSignals(InstallKey /*key*/, UniqueFd signal_fd, UniqueFd wake_fd,
                                 const sigset_t& previous_mask, ForceExit on_second_signal)
    : signal_fd_(std::move(signal_fd)),
      wake_fd_(std::move(wake_fd)),
      previous_mask_(previous_mask),
      on_second_signal_(std::move(on_second_signal)),
      watcher_([this](const std::stop_token& stop) { Watch(stop); }) {}

ShutdownSignals::~ShutdownSignals() {
  watcher_.request_stop();
  if (watcher_.joinable()) watcher_.join();
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  g_installed = false;
}

void ShutdownSignals::RequestStop() { stop_source_.request_stop(); }

int ShutdownSignals::WaitForShutdown() {
  MutexLock lock(wait_mutex_);
  // Wakes when the stop is requested; the predicate alone never holds.
  wait_cv_.wait(lock.native(), stop_source_.get_token(), [] { return false; });
  return signal_.load();
}

void ShutdownSignals::Watch(const std::stop_token& watcher_stop) {
  // The destructor's request_stop runs this callback, which wakes poll().
  std::stop_callback wake(watcher_stop, [this] {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  });
  int signals_seen = 0;
  while (!watcher_stop.stop_requested()) {
    pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("signal watcher stopped", {{"err", ErrnoToStatus(errno, "poll")}});
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    signalfd_siginfo info{};
    const ssize_t n = ::read(signal_fd_.get(), &info, sizeof(info));
    if (n != static_cast<ssize_t>(sizeof(info))) continue;  // EAGAIN: already taken
    const int signal_number = static_cast<int>(info.ssi_signo);
    if (++signals_seen == 1) {
      signal_.store(signal_number);
      LOG_INFO(0, "shutdown requested by signal",
               {{"signal", signal_number}, {"senderPid", info.ssi_pid}});
      stop_source_.request_stop();
    } else {
      on_second_signal_(signal_number);
    }
  }
}

}  // namespace nvdra::common
