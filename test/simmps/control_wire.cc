#include "control_wire.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace nvdra::simmps {
namespace {

common::StatusOr<sockaddr_un> UnixAddress(const std::filesystem::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string& text = path.native();
  if (text.size() >= sizeof(address.sun_path)) {
    return common::InvalidArgumentError(fmt::format(
        "socket path {} is longer than the {} bytes a unix socket allows", text,
        sizeof(address.sun_path) - 1));
  }
  std::memcpy(address.sun_path, text.c_str(), text.size() + 1);
  return address;
}

}  // namespace

common::StatusOr<common::UniqueFd> ConnectControlSocket(const std::filesystem::path& path) {
  auto address = UnixAddress(path);
  if (!address.ok()) return address.status();
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return common::ErrnoToStatus(errno, "socket");
  int rc = 0;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(sockaddr_un));
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    return common::UnavailableError(
        fmt::format("connect {}: {}", path.string(), std::strerror(errno)));
  }
  return fd;
}

common::StatusOr<common::UniqueFd> ListenControlSocket(const std::filesystem::path& path) {
  auto address = UnixAddress(path);
  if (!address.ok()) return address.status();
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return common::ErrnoToStatus(errno, "socket");
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(sockaddr_un)) < 0) {
    return common::ErrnoToStatus(errno, "bind " + path.string());
  }
  if (::listen(fd.get(), SOMAXCONN) < 0) {
    return common::ErrnoToStatus(errno, "listen " + path.string());
  }
  return fd;
}

std::string EncodeReply(const std::vector<std::string>& lines) {
  std::string out = fmt::format("{}\n", lines.size());
  for (const auto& line : lines) {
    out += line;
    out += '\n';
  }
  return out;
}

common::Status SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoToStatus(errno, "send");
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return common::OkStatus();
}

common::StatusOr<std::string> LineReader::ReadLine() {
  for (;;) {
    if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    if (buffer_.size() > kMaxLineBytes) return common::DataLossError("line too long");
    char chunk[4096];
    const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoToStatus(errno, "read");
    if (n == 0) return common::UnavailableError("connection closed");
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

}  // namespace nvdra::simmps
