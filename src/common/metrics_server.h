#pragma once

// MetricsServer: serves a MetricsRegistry over HTTP for Prometheus, the
// --http-endpoint / --metrics-path endpoint of both kubelet plugins and the
// controller (upstream's RunPrometheusMetricsServer).
//
// GET (and HEAD) of exactly the metrics path answers 200 with the registry in
// text format 0.0.4; every other path answers 404, other methods 405.
//
// A small HTTP/1.1 server of our own, not cpp-httplib: Debian ships httplib
// only as a C++ shared object (with OpenSSL and brotli behind it), which kept
// the kubelet plugins on the shared libstdc++ (bench/README.md, "Where the
// plugin's RSS goes"). It answers one request per connection
// ("Connection: close"; Prometheus reconnects per scrape), one connection at a
// time, on one thread: a scrape is a few KiB rendered in microseconds. A
// connection gets 5 s in all (its request, the answer, the client's close), so
// a client that sends nothing holds the endpoint no longer than that; a
// request head over 16 KiB is refused (431).
//
// Ownership: owns the listening socket and the serving thread; borrows the
// registry, which must outlive the server. Destruction stops accepting,
// drops a connection in progress and joins the thread.
// Thread-safety: thread-safe (the accessors are immutable after Start).

#include <memory>
#include <string>
#include <string_view>

#include "common/metrics.h"
#include "common/status.h"

namespace nvdra::common {

class MetricsServer {
 public:
  // Binds `endpoint` and starts serving `registry` on `path`.
  // endpoint is Go's "host:port": ":8080" (every interface: IPv6 and IPv4
  // where the node has IPv6, otherwise IPv4), "127.0.0.1:0" (port 0: any free
  // port, see port()), "[::1]:9090", "localhost:8080". path must start with
  // '/' (MetricsFlags::Validate checks the flag); it is matched exactly.
  // kInvalidArgument: a malformed endpoint or path; kUnavailable: the
  // address cannot be bound (in use, not local).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsRegistry& registry, std::string_view endpoint,
                                                        std::string_view path);

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the one chosen when the endpoint said 0).
  int port() const;
  // Where it listens, "host:port" with the bound port ("[::]:8080",
  // "127.0.0.1:41235"), and the path served: for logs.
  std::string address() const;
  const std::string& path() const;

 private:
  struct State;
  explicit MetricsServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace nvdra::common
