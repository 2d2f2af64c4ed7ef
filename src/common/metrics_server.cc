#include "common/metrics_server.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "common/log.h"

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

// Like Go's listeners: SO_REUSEADDR (restart while old connections linger in
// TIME_WAIT) but not httplib's default SO_REUSEPORT, which would let a second
// plugin bind the same port silently; IPv6 sockets accept IPv4 too.
void SetListenSocketOptions(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  int domain = 0;
  socklen_t length = sizeof(domain);
  if (getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain == AF_INET6) {
    int no = 0;
    setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  }
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace

struct MetricsServer::State {
  State(const MetricsRegistry& r, std::string p) : registry(r), path(std::move(p)) {}

  const MetricsRegistry& registry;
  const std::string path;
  std::string host;  // as bound ("::" or "0.0.0.0" for every interface)
  int port = 0;
  httplib::Server server;

  std::mutex mu;  // guards serving and listen_returned
  std::condition_variable cv;
  bool serving = false;          // httplib runs its accept loop; stop() takes effect
  bool listen_returned = false;  // the serving thread is done

  std::jthread thread;  // last: joined before the rest is destroyed
};

MetricsServer::MetricsServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsRegistry& registry,
                                                              std::string_view endpoint, std::string_view path) {
  ASSIGN_OR_RETURN(HostPort where, SplitEndpoint(endpoint));
  if (!path.starts_with('/')) {
    return InvalidArgumentError(fmt::format("metrics path \"{}\" must start with '/'", path));
  }
  auto state = std::make_unique<State>(registry, std::string(path));
  httplib::Server& server = state->server;
  server.set_socket_options(SetListenSocketOptions);
  State* raw = state.get();
  // A scrape every few seconds needs no more than two workers (httplib's
  // default is one per core). httplib takes ownership of the queue. It asks
  // for the queue once it counts as running (stop() works from then on), so
  // this is also the "serving" event Start waits for.
  server.new_task_queue = [raw] {
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->serving = true;
    }
    raw->cv.notify_all();
    return new httplib::ThreadPool(2);
  };
  // Every path is routed here (httplib patterns are regular expressions,
  // and the metrics path must match literally).
  server.Get(".*", [raw](const httplib::Request& request, httplib::Response& response) {
    if (request.path != raw->path) {
      response.status = 404;
      response.set_content("404 page not found\n", "text/plain; charset=utf-8");
      return;
    }
    response.set_content(raw->registry.Render(), std::string(kMetricsContentType));
  });

  // An empty host is every interface: IPv6 (which takes IPv4 too) unless the
  // node has no IPv6, then IPv4, as Go's net.Listen does.
  std::vector<std::string> hosts;
  if (where.host.empty()) {
    hosts = {"::", "0.0.0.0"};
  } else {
    hosts = {where.host};
  }
  for (const std::string& host : hosts) {
    if (where.port == 0) {
      const int port = server.bind_to_any_port(host);
      if (port > 0) state->port = port;
    } else if (server.bind_to_port(host, where.port)) {
      state->port = where.port;
    }
    if (state->port > 0) {
      state->host = host;
      break;
    }
  }
  if (state->port <= 0) {
    return UnavailableError(fmt::format("metrics endpoint \"{}\": cannot listen (address in use or not local)",
                                        endpoint));
  }

  state->thread = std::jthread([raw] {
    if (!raw->server.listen_after_bind()) {
      LOG_ERROR("metrics server stopped serving", {{"address", JoinHostPort(raw->host, raw->port)}});
    }
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->listen_returned = true;
    }
    raw->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(raw->mu);
    raw->cv.wait(lock, [raw] { return raw->serving || raw->listen_returned; });
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

MetricsServer::~MetricsServer() {
  if (!state_) return;
  // httplib's stop() acts only once the server counts as running (cpp-httplib
  // 0.11 has no wait_until_ready). Start waited for that, through the task
  // queue request; should a later httplib ask for the queue earlier, a lost
  // stop is repeated here instead of hanging the join.
  std::unique_lock<std::mutex> lock(state_->mu);
  while (!state_->listen_returned) {
    lock.unlock();
    state_->server.stop();
    lock.lock();
    state_->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return state_->listen_returned; });
  }
  lock.unlock();
  state_->thread.join();
}

int MetricsServer::port() const { return state_->port; }

std::string MetricsServer::address() const { return JoinHostPort(state_->host, state_->port); }

const std::string& MetricsServer::path() const { return state_->path; }

}  // namespace nvdra::common
