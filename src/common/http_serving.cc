#include "common/http_serving.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "common/log.h"

namespace nvdra::common {

namespace {

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

}  // namespace

StatusOr<std::unique_ptr<HttpServing>> HttpServing::Start(httplib::Server& server, const std::string& host, int port,
                                                          std::size_t threads, std::string_view what) {
  std::unique_ptr<HttpServing> serving(new HttpServing(server, std::string(what)));
  HttpServing* raw = serving.get();
  server.set_socket_options(SetListenSocketOptions);
  // httplib asks for its task queue (and takes ownership of it) once it
  // counts as running: the "serving" event Start waits for.
  server.new_task_queue = [raw, threads] {
    {
      MutexLock lock(raw->mu_);
      raw->serving_ = true;
    }
    raw->cv_.notify_all();
    return new httplib::ThreadPool(threads);
  };
  const std::vector<std::string> hosts =
      host.empty() ? std::vector<std::string>{"::", "0.0.0.0"} : std::vector<std::string>{host};
  for (const std::string& candidate : hosts) {
    if (port == 0) {
      const int bound = server.bind_to_any_port(candidate);
      if (bound > 0) raw->port_ = bound;
    } else if (server.bind_to_port(candidate, port)) {
      raw->port_ = port;
    }
    if (raw->port_ > 0) {
      raw->host_ = candidate;
      break;
    }
  }
  if (raw->port_ <= 0) {
    return UnavailableError(fmt::format("{}: cannot listen (address in use or not local)", what));
  }
  raw->thread_ = std::jthread([raw] {
    if (!raw->server_.listen_after_bind()) {
      LOG_ERROR("stopped serving", {{"server", raw->what_}, {"address", raw->address()}});
    }
    {
      MutexLock lock(raw->mu_);
      raw->listen_returned_ = true;
    }
    raw->cv_.notify_all();
  });
  {
    MutexLock lock(raw->mu_);
    raw->cv_.wait(lock.native(), [raw]() REQUIRES(raw->mu_) { return raw->serving_ || raw->listen_returned_; });
  }
  return serving;
}

HttpServing::~HttpServing() {
  if (!thread_.joinable()) return;
  // A stop() before httplib counts as running (serving_) is lost: repeat it
  // until one lands while running. Never one more: a second stop() while
  // listen winds down finds the socket already closed (httplib asserts on
  // that, and closes descriptor -1 without the assert; the sanitized
  // trees, built without NDEBUG, caught it when a busy worker kept listen
  // from returning within 50 ms).
  MutexLock lock(mu_);
  bool stopped = false;
  while (!listen_returned_) {
    if (!stopped) {
      const bool running = serving_;
      lock.Unlock();
      server_.stop();
      lock.Lock();
      stopped = running;
    }
    cv_.wait_for(lock.native(), std::chrono::milliseconds(50), [&]() REQUIRES(mu_) { return listen_returned_; });
  }
  lock.Unlock();
  thread_.join();
}

std::string HttpServing::address() const {
  if (host_.find(':') != std::string::npos) return fmt::format("[{}]:{}", host_, port_);
  return fmt::format("{}:{}", host_, port_);
}

}  // namespace nvdra::common
