#pragma once

// HttpServing: serves one cpp-httplib server (plain or TLS) on a thread of its
// own; shared by the metrics endpoint and the webhook.
//
// Why a class: httplib's stop() acts only once the server counts as running
// (cpp-httplib 0.11 has no wait_until_ready). Start waits for that moment,
// which is when httplib asks for its task queue, and the destructor repeats a
// stop that came too early instead of hanging the join. Listening sockets are
// set up as Go's listeners are: SO_REUSEADDR (a restart while old connections
// linger in TIME_WAIT) but not httplib's default SO_REUSEPORT, which would let
// a second process bind the same port silently; IPv6 sockets take IPv4 too.
//
// Ownership: borrows the server, which must outlive this object (declare the
// HttpServing after the server so that it is destroyed first). Its routes
// and options must be set before Start. Thread-safety: the accessors are
// thread-safe; Start and the destructor are not concurrent with anything.

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace httplib {
class Server;
}

namespace nvdra::common {

class HttpServing {
 public:
  // Binds `server` to `host` (empty: every interface, IPv6 with IPv4, else
  // IPv4 alone, as Go's ":port") and `port` (0: any free port), gives it
  // `threads` workers and serves until destroyed. kUnavailable, named after
  // `what` (e.g. `metrics endpoint ":8080"`), when nothing could be bound.
  static StatusOr<std::unique_ptr<HttpServing>> Start(httplib::Server& server, const std::string& host, int port,
                                                      std::size_t threads, std::string_view what);
  ~HttpServing();  // stops serving and joins the thread
  HttpServing(const HttpServing&) = delete;
  HttpServing& operator=(const HttpServing&) = delete;

  int port() const { return port_; }                     // as bound
  const std::string& host() const { return host_; }      // as bound ("::" or "0.0.0.0": every interface)
  std::string address() const;                           // "host:port", IPv6 in brackets, for logs

 private:
  HttpServing(httplib::Server& server, std::string what) : server_(server), what_(std::move(what)) {}

  httplib::Server& server_;
  const std::string what_;
  std::string host_;
  int port_ = 0;
  Mutex mu_;
  std::condition_variable cv_;
  bool serving_ GUARDED_BY(mu_) = false;          // httplib runs its accept loop; stop() takes effect
  bool listen_returned_ GUARDED_BY(mu_) = false;  // the serving thread is done
  std::jthread thread_;
};

}  // namespace nvdra::common
