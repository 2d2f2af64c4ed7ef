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

Status ReplaceFile(const std::filesystem::path& path, std::string_view data, unsigned mode, bool durable) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return ErrnoToStatus(ec.value(), "create " + path.parent_path().string());
  const std::string tmp = path.string() + ".tmp";
  Status written = OkStatus();
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    if (!fd) return ErrnoToStatus(errno, "create " + tmp);
    written = WriteAll(fd.get(), data, tmp);
    if (written.ok() && durable && ::fsync(fd.get()) != 0) written = ErrnoToStatus(errno, "fsync " + tmp);
  }
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written = ErrnoToStatus(errno, "rename " + tmp + " to " + path.string());
  }
  if (!written.ok()) ::unlink(tmp.c_str());
  return written;
}

}  // namespace nvdra::common
