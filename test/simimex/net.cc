#include "net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace nvdra::simimex {
namespace {

using common::UniqueFd;

// Fills `storage` for ip:port. False if `ip` is not numeric.
bool MakeSockaddr(const std::string& ip, std::uint16_t port, sockaddr_storage& storage,
                  socklen_t& length) {
  std::memset(&storage, 0, sizeof(storage));
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  if (ip.empty() || ::inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    if (ip.empty()) v4->sin_addr.s_addr = htonl(INADDR_ANY);
    length = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    length = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string AddressToString(const sockaddr* sa) {
  char buffer[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buffer,
                sizeof(buffer));
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buffer,
                sizeof(buffer));
  }
  return buffer;
}

bool WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the next call report it
  }
}

}  // namespace

std::optional<std::string> CanonicalAddress(std::string_view text) {
  const std::string s(text);
  in_addr v4{};
  if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    char buffer[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &v4, buffer, sizeof(buffer));
    return std::string(buffer);
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    char buffer[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET6, &v6, buffer, sizeof(buffer));
    return std::string(buffer);
  }
  return std::nullopt;
}

std::optional<std::string> LookupHostsFile(std::string_view hosts_text, std::string_view name) {
  std::istringstream in{std::string(hosts_text)};
  std::string line;
  while (std::getline(in, line)) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string address;
    if (!(fields >> address)) continue;
    const auto canonical = CanonicalAddress(address);
    if (!canonical) continue;
    std::string alias;
    while (fields >> alias) {
      if (alias.size() == name.size() &&
          ::strncasecmp(alias.data(), name.data(), name.size()) == 0) {
        return canonical;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> Resolver::Resolve(std::string_view entry) const {
  if (auto literal = CanonicalAddress(entry)) return literal;
  // Read at every lookup: the compute-domain daemon rewrites the file and then
  // expects the next (re)connect to see the change.
  std::ifstream in(hosts_file_);
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    if (auto found = LookupHostsFile(text.str(), entry)) return found;
  }
  if (!use_system_resolver_) return std::nullopt;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string host(entry);
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0 || result == nullptr) {
    return std::nullopt;
  }
  std::string address = AddressToString(result->ai_addr);
  ::freeaddrinfo(result);
  if (address.empty()) return std::nullopt;
  return address;
}

std::set<std::string> LocalInterfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family != AF_INET && it->ifa_addr->sa_family != AF_INET6) continue;
    out.insert(AddressToString(it->ifa_addr));
  }
  ::freeifaddrs(list);
  return out;
}

common::StatusOr<UniqueFd> ListenTcp(const std::string& ip, std::uint16_t port) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  if (!MakeSockaddr(ip, port, storage, length)) {
    return common::InvalidArgumentError(fmt::format("{:?} is not a numeric address", ip));
  }
  UniqueFd fd(::socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return common::ErrnoToStatus(errno, "socket");
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const std::string where = fmt::format("{}:{}", ip.empty() ? "0.0.0.0" : ip, port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0) {
    return common::ErrnoToStatus(errno, "bind " + where);
  }
  if (::listen(fd.get(), 64) != 0) return common::ErrnoToStatus(errno, "listen " + where);
  return fd;
}

common::StatusOr<UniqueFd> ListenUnix(const std::filesystem::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string s = path.string();
  if (s.size() >= sizeof(address.sun_path)) {
    return common::InvalidArgumentError("unix socket path too long: " + s);
  }
  std::memcpy(address.sun_path, s.c_str(), s.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return common::ErrnoToStatus(errno, "socket");
  ::unlink(s.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return common::ErrnoToStatus(errno, "bind " + s);
  }
  if (::listen(fd.get(), 16) != 0) return common::ErrnoToStatus(errno, "listen " + s);
  return fd;
}

common::StatusOr<UniqueFd> StartConnect(const std::string& ip, std::uint16_t port) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  if (ip.empty() || !MakeSockaddr(ip, port, storage, length)) {
    return common::InvalidArgumentError(fmt::format("{:?} is not a numeric address", ip));
  }
  UniqueFd fd(::socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return common::ErrnoToStatus(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&storage), length) != 0 &&
      errno != EINPROGRESS) {
    return common::ErrnoToStatus(errno, fmt::format("connect {}:{}", ip, port));
  }
  return fd;
}

std::string CommandEndpoint::ToString() const {
  if (!unix_path.empty()) return "unix:" + unix_path.string();
  return fmt::format("{}:{}", ip, port);
}

common::StatusOr<std::string> RunCommand(const CommandEndpoint& endpoint,
                                         std::string_view request,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string where = endpoint.ToString();
  UniqueFd fd;
  if (!endpoint.unix_path.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string s = endpoint.unix_path.string();
    if (s.size() >= sizeof(address.sun_path)) {
      return common::InvalidArgumentError("unix socket path too long: " + s);
    }
    std::memcpy(address.sun_path, s.c_str(), s.size() + 1);
    fd.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return common::ErrnoToStatus(errno, "socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      return common::UnavailableError(
          fmt::format("connect {}: {}", where, std::strerror(errno)));
    }
  } else {
    auto started = StartConnect(endpoint.ip, endpoint.port);
    if (!started.ok()) return common::UnavailableError(started.status().message());
    fd = std::move(started).value();
    if (!WaitFd(fd.get(), POLLOUT, deadline)) {
      return common::DeadlineExceededError("connect " + where + ": timed out");
    }
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return common::UnavailableError(fmt::format("connect {}: {}", where, std::strerror(error)));
    }
  }
  std::string line(request);
  line += '\n';
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    return common::UnavailableError(fmt::format("send {}: {}", where, std::strerror(errno)));
  }
  std::string response;
  char buffer[4096];
  for (;;) {
    if (!WaitFd(fd.get(), POLLIN, deadline)) {
      return common::DeadlineExceededError("read " + where + ": timed out");
    }
    const ssize_t n = ::recv(fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return common::UnavailableError(fmt::format("read {}: {}", where, std::strerror(errno)));
    }
    response.append(buffer, static_cast<std::size_t>(n));
  }
  return response;
}

}  // namespace nvdra::simimex
