#include "control_log.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <fmt/format.h>

namespace nvdra::simmps {

common::StatusOr<ControlLog> ControlLog::Open(const std::filesystem::path& path, pid_t pid) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return common::ErrnoToStatus(errno, "open " + path.string());
  return ControlLog(common::UniqueFd(fd), pid);
}

void ControlLog::Write(std::string_view message) const {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  ::localtime_r(&now.tv_sec, &local);
  char date[32];
  const std::size_t n = std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &local);
  const std::string line = fmt::format("[{}.{:03d} Control {:5d}] {}\n", std::string_view(date, n),
                                       now.tv_nsec / 1000000, pid_, message);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(fd_.get(), line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

}  // namespace nvdra::simmps
