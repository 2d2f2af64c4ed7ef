#include "ready_file.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "common/unique_fd.h"

namespace nvdra::simsysfs {

namespace fs = std::filesystem;
using common::Status;

namespace {

bool NamesPid(const fs::path& file, pid_t pid) {
  std::ifstream in(file);
  long value = 0;
  return in >> value && value == pid;
}

}  // namespace

fs::path ReadyFile(const fs::path& driver_root) { return driver_root / "mock-nvml" / "simsysfs.ready"; }

Status WriteReadyFile(const fs::path& driver_root, pid_t pid) {
  const fs::path file = ReadyFile(driver_root);
  const fs::path temp = file.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << pid << "\n";
    if (!out.flush()) return common::InternalError("write " + temp.string());
  }
  std::error_code ec;
  fs::rename(temp, file, ec);
  if (ec) return common::InternalError(fmt::format("rename {}: {}", temp.string(), ec.message()));
  return common::OkStatus();
}

void RemoveReadyFile(const fs::path& driver_root, pid_t pid) {
  const fs::path file = ReadyFile(driver_root);
  std::error_code ec;
  if (NamesPid(file, pid)) fs::remove(file, ec);
}

Status AwaitReady(const fs::path& driver_root, pid_t pid, int pidfd, std::chrono::milliseconds timeout) {
  const fs::path file = ReadyFile(driver_root);
  common::UniqueFd inotify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!inotify) return common::ErrnoToStatus(errno, "inotify_init1");
  // The watch first, then the check: a file written in between still wakes us.
  if (::inotify_add_watch(inotify.get(), file.parent_path().c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    return common::NotFoundError(fmt::format("cannot watch {}: {}", file.parent_path().string(),
                                             std::strerror(errno)));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!NamesPid(file, pid)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return common::DeadlineExceededError(
          fmt::format("simsysfs (pid {}) wrote no {} within {} ms", pid, file.string(), timeout.count()));
    }
    std::array<pollfd, 2> fds{{{inotify.get(), POLLIN, 0}, {pidfd, POLLIN, 0}}};
    const int n = ::poll(fds.data(), pidfd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return common::ErrnoToStatus(errno, "poll");
    if (pidfd >= 0 && (fds[1].revents & POLLIN) != 0 && !NamesPid(file, pid)) {
      return common::AbortedError(fmt::format("simsysfs (pid {}) ended before it was ready", pid));
    }
    std::array<char, 4096> drain{};
    while (::read(inotify.get(), drain.data(), drain.size()) > 0) {
    }
  }
  return common::OkStatus();
}

}  // namespace nvdra::simsysfs
