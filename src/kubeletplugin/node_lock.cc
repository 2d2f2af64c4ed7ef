#include "kubeletplugin/node_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

namespace nvdra::kubeletplugin {

common::StatusOr<FileLock> FileLock::Acquire(const std::filesystem::path& path,
                                             std::chrono::milliseconds timeout,
                                             std::stop_token stop) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::milliseconds kFirstWait{1};
  constexpr std::chrono::milliseconds kMaxWait{50};

  common::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return common::ErrnoToStatus(errno, "open lock file " + path.string());

  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds wait = kFirstWait;
  // Waiting on a condition variable that nothing notifies is a sleep that a
  // stop request cuts short.
  std::mutex mutex;
  std::condition_variable_any wake;
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return FileLock(path, std::move(fd));
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return common::ErrnoToStatus(errno, "flock " + path.string());
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return common::DeadlineExceededError(
          fmt::format("timed out after {} ms waiting for lock {} (held by another process or "
                      "plugin instance)",
                      timeout.count(), path.string()));
    }
    std::unique_lock lock(mutex);
    const auto until = std::min(deadline, now + wait);
    wake.wait_until(lock, stop, until, [] { return false; });
    if (stop.stop_requested()) {
      return common::CancelledError("stopped waiting for lock " + path.string());
    }
    wait = std::min(wait * 2, kMaxWait);
  }
}

}  // namespace nvdra::kubeletplugin
