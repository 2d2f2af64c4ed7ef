#include "common/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

namespace nvdra::common {

StatusOr<std::string> ReadWholeFile(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoToStatus(errno, "open " + path.string());
  std::string data;
  char buffer[16 * 1024];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "read " + path.string());
    }
    if (n == 0) return data;
    data.append(buffer, static_cast<std::size_t>(n));
  }
}

Status WriteAll(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write " + std::string(what));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return OkStatus();
}

}  // namespace nvdra::common
