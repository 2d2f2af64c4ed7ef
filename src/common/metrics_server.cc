#include "common/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::common {

namespace {

struct HostPort {
  std::string host;  // without brackets; empty: every interface
  int port = 0;
};

// Go's net.SplitHostPort rules, with a numeric port ("" counts as 0, as in
// net.Listen).
StatusOr<HostPort> SplitEndpoint(std::string_view endpoint) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("metrics endpoint \"{}\": {}", endpoint, why));
  };
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return bad("missing port (want host:port, e.g. \":8080\")");
  std::string_view host = endpoint.substr(0, colon);
  const std::string_view port_text = endpoint.substr(colon + 1);
  if (host.starts_with('[')) {
    if (!host.ends_with(']')) return bad("unbalanced '['");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return bad("too many colons (write an IPv6 address in brackets)");
  }
  HostPort out;
  out.host = std::string(host);
  if (port_text.size() > 5) return bad("port out of range");
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("port is not a number");
    out.port = out.port * 10 + (c - '0');
  }
  if (out.port > 65535) return bad("port out of range");
  return out;
}

// A client gets this long to send its request head and take the answer.
constexpr std::chrono::milliseconds kConnectionDeadline{5000};
// Request heads beyond this are refused; a scrape's is a few hundred bytes.
constexpr std::size_t kMaxRequestHead = 16 * 1024;

// Binds and listens on `host` ("" = every interface: "::" with IPv4 too,
// else "0.0.0.0", as Go's ":port") and `port`, as Go's listeners do:
// SO_REUSEADDR (a restart while old connections linger in TIME_WAIT), no
// SO_REUSEPORT (a second process must not bind the same port silently), IPv6
// sockets take IPv4 too. Returns the socket and the host it bound.
StatusOr<std::pair<UniqueFd, std::string>> Listen(const std::string& host, int port, std::string_view what) {
  const std::vector<std::string> hosts =
      host.empty() ? std::vector<std::string>{"::", "0.0.0.0"} : std::vector<std::string>{host};
  std::string last_error = "no address";
  for (const std::string& candidate : hosts) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = getaddrinfo(candidate.c_str(), service.c_str(), &hints, &found); rc != 0) {
      last_error = fmt::format("{}: {}", candidate, gai_strerror(rc));
      continue;
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      UniqueFd sock(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!sock) {
        last_error = std::strerror(errno);
        continue;
      }
      int yes = 1;
      setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      if (a->ai_family == AF_INET6) {
        int no = 0;
        setsockopt(sock.get(), IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
      }
      if (bind(sock.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(sock.get(), SOMAXCONN) != 0) {
        last_error = fmt::format("{}: {}", candidate, std::strerror(errno));
        continue;
      }
      return std::pair<UniqueFd, std::string>(std::move(sock), candidate);
    }
  }
  return UnavailableError(fmt::format("{}: cannot listen (address in use or not local): {}", what, last_error));
}

int BoundPort(int sock) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// %XX decoding of a request path, as Go's URL.Path and httplib see it; a
// malformed escape is kept as written (it then matches no metrics path).
std::string DecodePath(std::string_view raw) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
      i += 2;
    } else {
      out.push_back(raw[i]);
    }
  }
  return out;
}

std::string Response(std::string_view status, std::string_view content_type, std::string_view body,
                     bool with_body, std::string_view extra_headers = {}) {
  std::string out = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n", status,
      content_type, body.size(), extra_headers);
  if (with_body) out.append(body);
  return out;
}

}  // namespace

struct MetricsServer::State {
  State(const MetricsRegistry& r, std::string p) : registry(r), path(std::move(p)) {}

  // The serving thread: accepts connections until `stop` is signalled.
  void Serve();
  // Reads one request from `conn`, answers it; gives up at the deadline or on
  // stop. The caller closes the connection.
  void Answer(int conn);
  // The answer to a complete request head.
  std::string Route(std::string_view head) const;
  // Waits until `fd` is ready for `events` or stop/deadline; false then.
  bool WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) const;

  const MetricsRegistry& registry;
  const std::string path;
  UniqueFd listener;
  UniqueFd stop;  // eventfd: written once by the destructor
  std::string host;
  int port = 0;
  std::jthread thread;  // last: joined before the descriptors close
};

bool MetricsServer::State::WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) const {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {stop.get(), POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return false;
    if (n > 0) return true;
  }
}

void MetricsServer::State::Serve() {
  for (;;) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {stop.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("metrics endpoint stopped serving", {{"address", host}, {"err", std::strerror(errno)}});
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) continue;  // the client went away first, or out of descriptors for now
    Answer(conn.get());
  }
}

void MetricsServer::State::Answer(int conn) {
  const auto deadline = std::chrono::steady_clock::now() + kConnectionDeadline;
  std::string head;
  std::size_t end = std::string::npos;
  while (end == std::string::npos) {
    if (head.size() > kMaxRequestHead) {
      head.clear();
      break;
    }
    if (!WaitFor(conn, POLLIN, deadline)) return;
    char buffer[4096];
    const ssize_t n = recv(conn, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // closed before a whole request head
    head.append(buffer, static_cast<std::size_t>(n));
    end = head.find("\r\n\r\n");
  }
  const std::string answer =
      head.empty() ? Response("431 Request Header Fields Too Large", "text/plain; charset=utf-8",
                              "431 request header fields too large\n", true)
                   : Route(std::string_view(head).substr(0, end));
  std::size_t sent = 0;
  while (sent < answer.size()) {
    if (!WaitFor(conn, POLLOUT, deadline)) return;
    const ssize_t n = send(conn, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
  // Half-close, then read what the client still sends until it closes: a
  // close with unread input makes the kernel send a reset, which can destroy
  // the answer before the client has read it (a refused or pipelined request).
  shutdown(conn, SHUT_WR);
  for (std::size_t drained = 0; drained < kMaxRequestHead * 4 && WaitFor(conn, POLLIN, deadline);) {
    char buffer[4096];
    const ssize_t n = recv(conn, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    drained += static_cast<std::size_t>(n);
  }
}

std::string MetricsServer::State::Route(std::string_view head) const {
  // Request line: METHOD SP request-target SP HTTP-version.
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const std::size_t first = line.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || !line.substr(second + 1).starts_with("HTTP/1.")) {
    return Response("400 Bad Request", "text/plain; charset=utf-8", "400 bad request\n", true);
  }
  const std::string_view method = line.substr(0, first);
  std::string_view target = line.substr(first + 1, second - first - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return Response("405 Method Not Allowed", "text/plain; charset=utf-8", "405 method not allowed\n", true,
                    "Allow: GET, HEAD\r\n");
  }
  if (DecodePath(target) != path) {
    return Response("404 Not Found", "text/plain; charset=utf-8", "404 page not found\n", !head_only);
  }
  return Response("200 OK", kMetricsContentType, registry.Render(), !head_only);
}

MetricsServer::MetricsServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsRegistry& registry,
                                                              std::string_view endpoint, std::string_view path) {
  ASSIGN_OR_RETURN(HostPort where, SplitEndpoint(endpoint));
  if (!path.starts_with('/')) {
    return InvalidArgumentError(fmt::format("metrics path \"{}\" must start with '/'", path));
  }
  auto state = std::make_unique<State>(registry, std::string(path));
  ASSIGN_OR_RETURN(auto bound, Listen(where.host, where.port, fmt::format("metrics endpoint \"{}\"", endpoint)));
  state->listener = std::move(bound.first);
  state->host = std::move(bound.second);
  state->port = BoundPort(state->listener.get());
  state->stop = UniqueFd(eventfd(0, EFD_CLOEXEC));
  if (!state->stop) {
    return InternalError(fmt::format("metrics endpoint \"{}\": eventfd: {}", endpoint, std::strerror(errno)));
  }
  State* raw = state.get();
  state->thread = std::jthread([raw] { raw->Serve(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

MetricsServer::~MetricsServer() {
  const std::uint64_t one = 1;
  // An eventfd write of 1 cannot fail short of a closed descriptor.
  [[maybe_unused]] const ssize_t written = write(state_->stop.get(), &one, sizeof(one));
  state_->thread.join();
}

int MetricsServer::port() const { return state_->port; }

std::string MetricsServer::address() const {
  if (state_->host.find(':') != std::string::npos) return fmt::format("[{}]:{}", state_->host, state_->port);
  return fmt::format("{}:{}", state_->host, state_->port);
}

const std::string& MetricsServer::path() const { return state_->path; }

}  // namespace nvdra::common
